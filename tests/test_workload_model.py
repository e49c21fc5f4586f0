"""Loading, saving and validating workloads: every validation error on a crafted bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genie.errors import GenieError, TraceFormatError, ValidationError, WorkloadError
from genie.workload import (
    Attr,
    CollectiveType,
    Node,
    NodeKind,
    NodeType,
    load_workload,
    save_workload,
    topological_order,
)
from genie.workload.et_codec import encode_node, uvarint, write_trace
from genie.workload.generators.builder import RankBuilder, finish
from genie.workload.graph import critical_path
from genie.workload.model import Metadata
from genie.workload.summary import summarize

COMP = NodeType.COMP_NODE
COLL = NodeType.COMM_COLL_NODE


def coll(nid: int, ctype: int | None = 0, size: int | None = 1024, deps=(), pg="") -> Node:
    attrs = [Attr("is_cpu_op", "bool_val", False)]
    if ctype is not None:
        attrs.append(Attr("comm_type", "int64_val", ctype))
    if size is not None:
        attrs.append(Attr("comm_size", "int64_val", size))
    if pg:
        attrs.append(Attr("pg_name", "string_val", pg))
    return Node(nid, f"c{nid}", COLL, data_deps=list(deps), attrs=attrs)


def comp(nid: int, deps=(), us: int = 10, ctrl=()) -> Node:
    return Node(
        nid, f"k{nid}", COMP, data_deps=list(deps), ctrl_deps=list(ctrl), duration_micros=us
    )


def p2p(nid: int, send: bool, src: int, dst: int, size=64, tag=0, peer=True) -> Node:
    attrs = [Attr("comm_size", "int64_val", size), Attr("comm_tag", "int32_val", tag)]
    if peer:
        attrs += [Attr("comm_src", "int32_val", src), Attr("comm_dst", "int32_val", dst)]
    t = NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE
    return Node(nid, f"p{nid}", t, attrs=attrs)


def write_set(tmp: Path, ranks: dict[int, list[Node]], name: str = "w") -> Path:
    prefix = tmp / name
    for r, nodes in ranks.items():
        write_trace(prefix.with_name(f"{name}.{r}.et"), Metadata(), nodes)
    return prefix


def load_error(tmp: Path, ranks: dict[int, list[Node]], err=ValidationError) -> str:
    with pytest.raises(err) as e:
        load_workload(write_set(tmp, ranks))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------ loading


def test_load_shared_sample_directory(et_samples: Path) -> None:
    d = et_samples / "astra-sim" / "microbenchmarks" / "all_gather" / "4npus_1MB"
    wl = load_workload(d)
    assert wl.n_ranks == 4 and wl.groups[""] == (0, 1, 2, 3)
    n = wl.ranks[2].nodes[0]
    assert n.kind is NodeKind.COLLECTIVE and n.collective is CollectiveType.ALL_GATHER
    assert n.comm_size == 1048576 and n.pg_name == "" and wl.problems == []
    # the same set through an explicit prefix and through one rank file
    assert load_workload(d / "all_gather").ranks[3].nodes == wl.ranks[3].nodes
    assert load_workload(d / "all_gather.1.et").n_ranks == 4


def test_forward_data_deps_are_resolved_in_two_passes(tmp_path: Path) -> None:
    wl = load_workload(write_set(tmp_path, {0: [comp(1, deps=[2]), comp(2), comp(3, deps=[1])]}))
    order = [n.id for n in topological_order(wl.ranks[0])]
    assert order == [2, 1, 3]
    length, chain = critical_path(wl.ranks[0])
    assert length == pytest.approx(30e-6) and [n.id for n in chain] == [2, 1, 3]


def test_ctrl_deps_filtered_and_counted_but_kept_for_round_trip(tmp_path: Path) -> None:
    nodes = [comp(1), comp(2, ctrl=[2, 1, 99, 98]), comp(3, ctrl=[3])]
    prefix = write_set(tmp_path, {0: nodes})
    raw = (tmp_path / "w.0.et").read_bytes()
    wl = load_workload(prefix)
    n2 = wl.ranks[0].by_id[2]
    assert n2.ctrl_deps == [1] and n2.raw_ctrl_deps == [2, 1, 99, 98]
    assert wl.ranks[0].by_id[3].ctrl_deps == []
    assert any(
        "dropped 4 ctrl_deps (2 to the node itself, 2 to missing ids)" in p for p in wl.problems
    )
    save_workload(wl, tmp_path / "out" / "w")
    assert (tmp_path / "out" / "w.0.et").read_bytes() == raw


def test_gz_rank_files_load(tmp_path: Path) -> None:
    wl = finish("t", [RankBuilder(0), RankBuilder(1)])
    for b in wl.ranks:
        b.nodes.append(coll(0))
    save_workload(wl, tmp_path / "z", compress=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["z.0.et.gz", "z.1.et.gz"]
    assert load_workload(tmp_path / "z").ranks[1].nodes == wl.ranks[1].nodes


def test_save_removes_stale_rank_files_and_creates_dirs(tmp_path: Path) -> None:
    prefix = tmp_path / "deep" / "er" / "w"
    big = finish("t", [RankBuilder(r) for r in range(3)])
    for r in big.ranks:
        r.nodes.append(comp(0))
    save_workload(big, prefix)
    small = finish("t", [RankBuilder(r) for r in range(2)])
    for r in small.ranks:
        r.nodes.append(comp(0))
    save_workload(small, prefix)
    assert load_workload(prefix).n_ranks == 2


# ------------------------------------------------------------------ process groups


def test_groups_from_side_file_and_metadata(tmp_path: Path) -> None:
    ranks = {r: [coll(0, pg="pair" if r < 2 else "other")] for r in range(4)}
    prefix = write_set(tmp_path, ranks)
    (tmp_path / "w.comm_group.json").write_text(json.dumps({"pair": [0, 1], "other": [2, 3]}))
    wl = load_workload(prefix)
    assert wl.groups["pair"] == (0, 1) and wl.groups["other"] == (2, 3)
    assert wl.problems == []
    # the same groups recorded in GlobalMetadata instead (what genie's generators write)
    (tmp_path / "w.comm_group.json").unlink()
    meta = Metadata(
        "0.0.4",
        [Attr("pg_ranks:pair", "int64_list", [0, 1]), Attr("pg_ranks:other", "int64_list", [2, 3])],
    )
    for r, nodes in ranks.items():
        write_trace(tmp_path / f"w.{r}.et", meta, nodes)
    assert load_workload(prefix).groups["other"] == (2, 3)


def test_unknown_group_and_mismatched_sequences_are_problems(tmp_path: Path) -> None:
    wl = load_workload(write_set(tmp_path, {0: [coll(0, pg="g7")], 1: [coll(0, pg="g7")]}))
    assert any("'g7' is used but its members are unknown" in p for p in wl.problems)
    wl = load_workload(
        write_set(
            tmp_path, {0: [coll(0), coll(1, 2, deps=[0])], 1: [coll(0), coll(1, 7, deps=[0])]}, "m"
        )
    )
    assert any(
        "collective #1 differs between rank 0" in p and "REDUCE_SCATTER" in p for p in wl.problems
    )
    assert summarize(wl)["problems"] == wl.problems


@pytest.mark.parametrize("reader", ["objects", "columns"])
def test_group_naming_a_missing_rank(tmp_path: Path, reader: str) -> None:
    from genie.workload.columnar import load_columns

    load = load_workload if reader == "objects" else load_columns
    prefix = write_set(tmp_path, {0: [coll(0, pg="g")], 1: [coll(0, pg="g")]})
    (tmp_path / "w.comm_group.json").write_text(json.dumps({"g": [0, 1, 2]}))
    with pytest.raises(WorkloadError, match=r"rank files missing for ranks \[2\]"):
        load(prefix)


@pytest.mark.parametrize("reader", ["objects", "columns"])
def test_world_group_only_where_a_node_names_it(tmp_path: Path, reader: str) -> None:
    """Both readers resolve groups alike: the world group appears where a node names it."""
    from genie.workload.columnar import load_columns
    from genie.workload.process_groups import WORLD_PG_NAME

    load = load_workload if reader == "objects" else load_columns
    named = load(write_set(tmp_path, {r: [coll(0, pg=WORLD_PG_NAME)] for r in range(3)}, "a"))
    assert named.groups[WORLD_PG_NAME] == (0, 1, 2)
    plain = load(write_set(tmp_path, {r: [coll(0, pg="g")] for r in range(2)}, "b"))
    assert WORLD_PG_NAME not in plain.groups


# ------------------------------------------------------------------ validation errors


def test_cycle_names_the_nodes(tmp_path: Path) -> None:
    msg = load_error(
        tmp_path, {0: [comp(1, deps=[3]), comp(2, deps=[1]), comp(3, deps=[2]), comp(4)]}
    )
    assert "cycle" in msg
    for nid in (1, 2, 3):
        assert f"id {nid} 'k{nid}'" in msg
    assert "id 4" not in msg


def test_self_data_dep_is_dropped_and_counted_not_a_cycle(tmp_path: Path) -> None:
    wl = load_workload(write_set(tmp_path, {0: [comp(1), comp(2, deps=[2, 1])]}))
    assert wl.dropped["data_deps_to_self"] == 1
    assert any("dropped 1 data_deps to the node itself" in p for p in wl.problems)
    assert [n.id for n in topological_order(wl.ranks[0])] == [1, 2]
    assert critical_path(wl.ranks[0])[0] == pytest.approx(20e-6)


def test_dangling_data_dep(tmp_path: Path) -> None:
    msg = load_error(tmp_path, {0: [comp(1), comp(2, deps=[1, 42])]})
    assert "data_dep 42" in msg and "dangling" in msg and "w.0.et" in msg


def test_collective_without_comm_type_is_not_an_all_reduce(tmp_path: Path) -> None:
    msg = load_error(tmp_path, {0: [coll(0, ctype=None)], 1: [coll(0)]})
    assert "without comm_type" in msg


def test_collective_without_comm_size(tmp_path: Path) -> None:
    assert "without comm_size" in load_error(tmp_path, {0: [coll(0, size=None)]})


def test_unknown_comm_type(tmp_path: Path) -> None:
    assert "unknown comm_type 42" in load_error(tmp_path, {0: [coll(0, ctype=42)]})


@pytest.mark.parametrize("size,word", [(-5, "negative"), (2**60, "absurd")])
def test_negative_and_absurd_sizes(tmp_path: Path, size: int, word: str) -> None:
    assert word in load_error(tmp_path, {0: [coll(0, size=size)]})


def test_absurd_duration_and_tensor_size(tmp_path: Path) -> None:
    assert "absurd duration" in load_error(tmp_path, {0: [comp(0, us=10**15)]})
    n = comp(0)
    n.set_attr("tensor_size", "int64_val", -1)
    assert "negative tensor_size" in load_error(tmp_path, {0: [n]})


def test_send_without_matching_recv(tmp_path: Path) -> None:
    msg = load_error(tmp_path, {0: [p2p(0, True, 0, 1, tag=3)], 1: [comp(0)]})
    assert "send to rank 1 tag 3 has no matching recv on rank 1" in msg


def test_recv_without_matching_send(tmp_path: Path) -> None:
    msg = load_error(tmp_path, {0: [comp(0)], 1: [p2p(0, False, 0, 1)]})
    assert "recv from rank 0 tag 0 has no matching send on rank 0" in msg


def test_send_recv_size_mismatch_and_missing_peer(tmp_path: Path) -> None:
    msg = load_error(tmp_path, {0: [p2p(0, True, 0, 1, size=8)], 1: [p2p(0, False, 0, 1, size=9)]})
    assert "sends 8 B" in msg and "expects 9 B" in msg
    msg = load_error(tmp_path, {0: [p2p(0, True, 0, 1, peer=False)], 1: [comp(0)]})
    assert "no peer" in msg
    msg = load_error(tmp_path, {0: [p2p(0, True, 0, 5)], 1: [comp(0)]})
    assert "peer 5 is not another rank" in msg


def test_matching_send_recv_loads(tmp_path: Path) -> None:
    wl = load_workload(write_set(tmp_path, {0: [p2p(0, True, 0, 1)], 1: [p2p(0, False, 0, 1)]}))
    assert wl.ranks[0].nodes[0].peer == 1 and wl.ranks[1].nodes[0].peer == 0


def test_sends_and_recvs_match_in_topological_not_file_order(tmp_path: Path) -> None:
    """Rank 0's file lists its 16 B send first, but it waits (a forward data_dep) on the 8 B
    one: in topological order the 8 B send comes first and meets rank 1's first recv."""
    late = p2p(0, True, 0, 1, size=16)
    late.data_deps = [1]
    first = p2p(1, True, 0, 1, size=8)
    recvs = [p2p(0, False, 0, 1, size=8), p2p(1, False, 0, 1, size=16)]
    recvs[1].data_deps = [0]
    wl = load_workload(write_set(tmp_path, {0: [late, first], 1: recvs}))
    assert [n.comm_size for n in wl.ranks[0].nodes] == [16, 8]
    in_file_order = [p2p(0, False, 0, 1, size=16), p2p(1, False, 0, 1, size=8)]
    swapped = write_set(tmp_path, {0: [late, first], 1: in_file_order}, "s")
    with pytest.raises(ValidationError, match="sends 8 B to rank 1 tag 0 but the matching"):
        load_workload(swapped)


def test_missing_rank_files_are_named(tmp_path: Path) -> None:
    msg = load_error(tmp_path, {0: [comp(0)], 2: [comp(0)], 4: [comp(0)]}, WorkloadError)
    assert "missing for ranks [1, 3]" in msg


def test_no_rank_files(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no rank files"):
        load_workload(tmp_path / "nothing")


def test_duplicate_node_ids(tmp_path: Path) -> None:
    assert "duplicate node id 1" in load_error(tmp_path, {0: [comp(1), comp(1)]})


def test_truncated_and_corrupt_frames_through_the_loader(tmp_path: Path) -> None:
    prefix = write_set(tmp_path, {0: [comp(0)], 1: [comp(0), comp(1)]})
    f = tmp_path / "w.1.et"
    data = f.read_bytes()
    f.write_bytes(data[:-2])
    with pytest.raises(TraceFormatError) as e:
        load_workload(prefix)
    body = encode_node(comp(1))
    offset = len(data) - len(body) - len(uvarint(len(body)))
    assert str(f) in str(e.value) and f"byte offset {offset}" in str(e.value)
    f.write_bytes(data[:offset] + uvarint(3) + b"\xff\xff\xff")
    with pytest.raises(TraceFormatError, match=f"corrupt Node frame at byte offset {offset}"):
        load_workload(prefix)


def test_every_error_is_a_genie_error() -> None:
    for cls in (ValidationError, TraceFormatError, WorkloadError):
        assert issubclass(cls, GenieError) and cls.exit_code == 2


# ------------------------------------------------------------------ hypothesis round trip

KINDS = st.sampled_from(
    [
        "int64_val",
        "int32_val",
        "double_val",
        "string_val",
        "bool_val",
        "uint64_list",
        "float_list",
        "bytes_val",
        "sint64_val",
    ]
)
VALUES = {
    "int64_val": st.integers(-(2**63), 2**63 - 1),
    "int32_val": st.integers(-(2**31), 2**31 - 1),
    "double_val": st.floats(allow_nan=False),
    "string_val": st.text(max_size=8),
    "bool_val": st.booleans(),
    "uint64_list": st.lists(st.integers(0, 2**64 - 1), max_size=3),
    "float_list": st.lists(st.floats(width=32, allow_nan=False), max_size=3),
    "bytes_val": st.binary(max_size=8),
    "sint64_val": st.integers(-(2**63), 2**63 - 1),
}


@st.composite
def workloads(draw):
    n_ranks = draw(st.integers(1, 3))
    n_coll = draw(st.integers(0, 3))
    colls = [
        (draw(st.sampled_from(list(CollectiveType))), draw(st.integers(0, 2**40)))
        for _ in range(n_coll)
    ]
    builders = [RankBuilder(r) for r in range(n_ranks)]
    for b in builders:
        for k in range(draw(st.integers(1, 12))):
            deps = draw(st.lists(st.integers(0, max(0, k - 1)), max_size=3)) if k else []
            nid = b.compute(f"n{k}", draw(st.floats(1e-6, 1.0)), deps)
            for _ in range(draw(st.integers(0, 2))):
                kind = draw(KINDS)
                b.nodes[nid].attrs.append(
                    Attr(draw(st.sampled_from(["x", "y", ""])), kind, draw(VALUES[kind]))
                )
        prev = len(b.nodes) - 1
        for t, s in colls:
            prev = b.collective(f"c{t.name}", t, s, [prev])
    return finish("hyp", builders, {"all": tuple(range(n_ranks))} if n_ranks > 1 else {})


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(workloads())
def test_random_workloads_round_trip_through_files(tmp_path: Path, wl) -> None:
    prefix = tmp_path / "h" / "wl"
    files = save_workload(wl, prefix)
    back = load_workload(prefix)
    assert back.n_ranks == wl.n_ranks and back.groups == wl.groups
    assert back.problems == []
    for a, b in zip(wl.ranks, back.ranks, strict=True):
        assert a.nodes == b.nodes and a.metadata == b.metadata
    save_workload(back, tmp_path / "h2" / "wl")
    for f in files:
        assert (tmp_path / "h2" / f.name).read_bytes() == f.read_bytes()


def test_field_checks_once_per_shared_derived_tuple_but_never_for_peers(monkeypatch) -> None:
    """Ranks whose nodes share derived tuples (as the readers and generators make them) have
    each tuple's field checks run once; a send's check reads its rank, so it runs for each."""
    from genie.workload import validate as V
    from genie.workload.model import RankGraph

    calls: list[int] = []
    real = V._check_fields

    def counted(rank, n, n_ranks):
        calls.append(n.type)
        real(rank, n, n_ranks)

    monkeypatch.setattr(V, "_check_fields", counted)
    base = [comp(0), coll(1, deps=[0]), p2p(2, True, 0, 1)]  # copies share the derived tuples
    passed: V.Passed = {}
    for r in range(4):
        nodes = [n.copy() for n in base]
        if r:
            nodes[2] = p2p(2, True, r, (r + 1) % 4)
        V.validate_rank(RankGraph(rank=r, nodes=nodes), 4, None, passed)
    assert calls.count(COMP) == 1 and calls.count(COLL) == 1
    assert calls.count(NodeType.COMM_SEND_NODE) == 4
    # a send sharing rank 0's derived tuple but on rank 1, to itself, is still refused
    with pytest.raises(ValidationError, match="peer 1 is not another rank"):
        V.validate_rank(RankGraph(rank=1, nodes=[n.copy() for n in base]), 4, None, passed)
    # a node whose tuple is another object is checked even where an equal one passed
    bad = [comp(0), coll(1, ctype=99, deps=[0])]
    with pytest.raises(ValidationError, match="unknown comm_type 99"):
        V.validate_rank(RankGraph(rank=2, nodes=bad), 4, None, passed)


def test_a_rank_outside_a_group_running_its_collectives_is_a_problem(tmp_path: Path) -> None:
    """A rank that runs a group's collectives without being a member is named (the members
    are a tuple; the check takes them as a set)."""
    prefix = write_set(tmp_path, {r: [coll(0, pg="g")] for r in range(3)})
    (tmp_path / "w.comm_group.json").write_text(json.dumps({"g": [0, 1]}))
    wl = load_workload(prefix)
    assert [p for p in wl.problems if "not a member" in p] == [
        "rank 2 runs collectives in group 'g' but is not a member"
    ]
