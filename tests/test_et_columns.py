"""The columnar ET decoder gives the nodes the frame-by-frame decoder gives, node for node."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genie.errors import TraceFormatError
from genie.workload import et_codec, et_fast
from genie.workload.et_codec import (
    _first_frame,
    decode_trace,
    decode_trace_protobuf,
    encode_node,
    encode_trace,
    uvarint,
)
from genie.workload.et_columns import NodeColumns, decode_columns
from genie.workload.model import DERIVED_INDEX, NO_DERIVED, Attr, IOInfo, Metadata, Node, NodeType
from tests.test_et_codec import nodes


def _decode_both(data: bytes) -> tuple[NodeColumns, list[Node], list[Node]]:
    """Columns, their nodes, and et_fast's nodes for the same bytes (counts checked equal)."""
    _meta, pos, _ = _first_frame(data, "<t>", "")
    cols = decode_columns(data, pos, "<t>")
    ref, odd, zero = et_fast.decode_nodes(data, pos, "<t>")
    got = cols.to_nodes()
    assert (cols.odd, cols.zero) == (odd, zero)
    assert len(got) == len(ref) == len(cols)
    for a, b in zip(got, ref, strict=True):
        assert a._d == b._d, (a, a._d, b._d)
        assert list(map(type, a._d)) == list(map(type, b._d)), (a, a._d, b._d)
        assert encode_node(a) == encode_node(b), a
        assert a.ctrl_deps is a.raw_ctrl_deps
        # every raw field, attrs and IOInfo decoded (attrs by repr: a NaN is not == itself)
        assert a == b or (repr(a.attrs) == repr(b.attrs) and a.copy() == _no_attrs(b, a)), a
    return cols, got, ref


def _no_attrs(b: Node, a: Node) -> Node:
    """``b`` with ``a``'s attrs (to compare the other fields where attrs hold a NaN)."""
    c = b.copy()
    c.attrs = a.attrs
    return c


def _trace(ns: list[Node], meta: Metadata | None = None) -> bytes:
    return encode_trace(meta or Metadata("0.0.4", []), ns)


def test_real_style_trace_decodes_in_columns_like_et_fast() -> None:
    from genie.workload.generators.pytorch_style import pytorch_style

    wl = pytorch_style(2, layers=4, steps=3)
    for rg in wl.ranks:
        data = _trace(rg.nodes, rg.metadata)
        cols, got, _ = _decode_both(data)
        assert cols.fallback == {}  # every frame on the columnar path
        assert got == rg.nodes
        assert _trace(got, rg.metadata) == data  # written back byte-exact from kept bytes
        # the columns themselves
        assert cols.id.tolist() == [n.id for n in rg.nodes]
        assert cols.type.tolist() == [n.type for n in rg.nodes]
        assert [cols.names[i] for i in cols.name] == [n.name for n in rg.nodes]
        assert cols.duration_micros.tolist() == [n.duration_micros for n in rg.nodes]
        deps = np.split(cols.data_deps, cols.data_offsets[1:-1])
        assert [d.tolist() for d in deps] == [n.data_deps for n in rg.nodes]
        ctrl = np.split(cols.ctrl_deps, cols.ctrl_offsets[1:-1])
        assert [d.tolist() for d in ctrl] == [n.raw_ctrl_deps for n in rg.nodes]
        for name, slot in DERIVED_INDEX.items():
            assert cols.derived_column(slot).tolist() == [n._d[slot] for n in rg.nodes], name
        assert len(cols.derived_table) < len(cols) // 10  # derived tuples interned
        assert len(cols.names) < len(cols)  # node names interned


@pytest.mark.parametrize("which", ["llm", "moe"])
def test_generated_workloads_decode_in_columns_like_et_fast(which: str) -> None:
    from genie.workload.generators.llm import llm
    from genie.workload.generators.moe import moe

    wl = llm(8, tp=2, pp=2, layers=4) if which == "llm" else moe(8)
    for rg in wl.ranks[:3]:
        data = _trace(rg.nodes, rg.metadata)
        cols, got, _ = _decode_both(data)
        assert cols.fallback == {}
        assert got == rg.nodes and _trace(got, rg.metadata) == data


def test_shared_samples_decode_in_columns_like_et_fast(et_samples: Path) -> None:
    files = sorted(et_samples.rglob("*.et"))
    assert files
    for f in files:
        data = f.read_bytes()
        cols, got, _ = _decode_both(data)
        assert cols.fallback == {} and got[0].comm_size == 1048576
        meta, _pos, _ = _first_frame(data, str(f), "")
        assert _trace(got, meta) == data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes(), max_size=8))
def test_any_nodes_decode_in_columns_like_et_fast_and_protobuf(ns: list[Node]) -> None:
    ns = [n for n in ns if encode_node(n)]
    data = _trace(ns)
    _cols, got, _ = _decode_both(data)
    _, ref = decode_trace_protobuf(data)
    for a, b in zip(got, ref, strict=True):
        assert encode_node(a) == encode_node(b) and a.attrs == b.attrs
    assert _trace(got) == data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(nodes(), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 10**6),
)
def test_corrupted_streams_decode_in_columns_like_et_fast(ns, flips, cut) -> None:
    ns = [n for n in ns if encode_node(n)]
    data = bytearray(_trace(ns))
    for at, byte in flips:
        data[at % len(data)] = byte
    data = bytes(data[: max(1, len(data) - cut % 4)])
    try:
        _meta, pos, _ = _first_frame(data, "<t>", "")
    except TraceFormatError:
        return  # the metadata frame is not this decoder's
    try:
        ref = et_fast.decode_nodes(data, pos, "<t>")
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError) as got:
            decode_columns(data, pos, "<t>")
        assert str(got.value) == str(exc)
        return
    _decode_both(data)
    assert ref is not None


def _frame(body: bytes) -> bytes:
    return uvarint(len(body)) + body


GOOD = encode_node(
    Node(
        300,
        "n",
        NodeType.COMP_NODE,
        data_deps=[1, 200],
        ctrl_deps=[2],
        duration_micros=150,
        inputs=IOInfo("v", "s", "t"),
        attrs=[Attr("rf_id", "int64_val", 9), Attr("num_ops", "int64_val", 5)],
    )
)
ODD_BODIES = {
    "padded id": b"\x08\x81\x00",
    "padded ctrl dep": b"\x08\x05\x22\x02\x81\x00",
    "padded data dep": b"\x08\x05\x2a\x03\x81\x80\x00",
    "padded name length": b"\x08\x05\x12\x81\x00" + b"a",
    "explicit zero id": b"\x08\x00\x18\x04",
    "fields out of order": b"\x18\x04\x08\x05",
    "unpacked data deps": b"\x08\x07\x28\x01\x28\x02",
    "unknown field": b"\x08\x07\x78\x05",
    "non-UTF-8 name": b"\x08\x05\x12\x02\xff\xfe",
    "non-UTF-8 input": b"\x08\x05\x42\x04\x0a\x02\xc3\x28",
    "UTF-8 input": b"\x08\x05\x42\x04\x0a\x02\xc3\xa9",
    "IOInfo fields reversed": b"\x08\x05\x42\x06\x12\x01a\x0a\x01b",
    "empty IOInfo string": b"\x08\x05\x42\x02\x0a\x00",
    "empty IOInfo": encode_node(Node(5, "c", 4, inputs=IOInfo(), outputs=IOInfo("", "s"))),
    "attr before duration": b"\x08\x05\x52\x02\x0a\x00\x38\x01",
    "list comm_size": encode_node(Node(5, "c", 7, attrs=[Attr("comm_size", "int64_list", [1, 2])])),
    "first attr derived": encode_node(
        Node(
            5,
            "c",
            7,
            attrs=[
                Attr("comm_size", "int64_val", 64),
                Attr("comm_type", "int64_val", 0),
                Attr("comm_size", "int64_val", 32),
            ],
        )
    ),
    "first attr alone derived": encode_node(
        Node(6, "c", 7, attrs=[Attr("comm_type", "int64_val", 2)])
    ),
    "negative first attr": encode_node(
        Node(5, "c", 4, attrs=[Attr("rf_id", "int64_val", -1), Attr("num_ops", "int64_val", 3)])
    ),
    "bool first": encode_node(
        Node(
            5,
            "c",
            4,
            attrs=[
                Attr("is_cpu_op", "bool_val", True),
                Attr("num_ops", "int64_val", 9),
                Attr("flag", "bool_val", False),
            ],
        )
    ),
    "bool 2 first": b"\x08\x05\x52\x0e\x0a\x09is_cpu_op\xd8\x01\x02",
    "doc string first": encode_node(Node(5, "c", 4, attrs=[Attr("rf_id", "int64_val", 1, "d")])),
    "largest ids": encode_node(
        Node(2**64 - 1, "x", 4, data_deps=[2**64 - 1, 2**63], duration_micros=2**64 - 1)
    ),
    "empty": b"",
    "truncated attr": b"\x08\x05\x52\x05\x0a\x01a",
}


@pytest.mark.parametrize("what", ODD_BODIES)
def test_odd_frames_leave_for_et_fast_and_read_alike(what: str) -> None:
    body = ODD_BODIES[what]
    data = _trace([]) + _frame(GOOD) * 3 + _frame(body) + _frame(GOOD)
    _meta, pos, _ = _first_frame(data, "<t>", "")
    try:
        et_fast.decode_nodes(data, pos, "<t>")
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError, match="byte offset") as got:
            decode_columns(data, pos, "<t>")
        assert str(got.value) == str(exc)
        return
    cols, got, _ = _decode_both(data)
    assert [n.id for n in got] == [300] * 3 + [got[3].id, 300]
    assert set(cols.fallback) == (set() if what in COLUMNAR else {3})


#: the frames above that are canonical: read on the columnar path
COLUMNAR = {
    "UTF-8 input",
    "bool first",
    "empty IOInfo",
    "first attr derived",
    "first attr alone derived",
    "negative first attr",
    "doc string first",
    "largest ids",
    "empty",
}


def test_padded_ctrl_dep_is_reported_not_kept() -> None:
    """A padded varint in ctrl_deps goes to protobuf and is counted non-canonical (it used to
    be kept, so a re-write silently differed)."""
    data = _trace([]) + _frame(ODD_BODIES["padded ctrl dep"])
    _, (n,), problems = decode_trace(data)
    assert n.raw_ctrl_deps == [1]
    assert any("non-canonical" in p for p in problems)


def test_load_reads_through_columns_above_the_threshold(tmp_path: Path, monkeypatch) -> None:
    from genie.workload import load_workload, save_workload
    from genie.workload.generators.pytorch_style import pytorch_style

    wl = pytorch_style(2, layers=4, steps=2)
    save_workload(wl, tmp_path / "t")
    calls = []
    real = NodeColumns.to_nodes

    def spy(self):
        calls.append(len(self))
        return real(self)

    monkeypatch.setattr(et_codec, "COLUMNS_FROM_BYTES", 0)
    monkeypatch.setattr(NodeColumns, "to_nodes", spy)
    got = load_workload(tmp_path / "t")
    assert calls == [len(r.nodes) for r in wl.ranks]
    monkeypatch.setattr(et_codec, "COLUMNS_FROM_BYTES", 1 << 60)
    ref = load_workload(tmp_path / "t")
    assert len(calls) == 2  # not called again
    assert [r.nodes for r in got.ranks] == [r.nodes for r in ref.ranks]
    assert got.problems == ref.problems and got.groups == ref.groups


# ------------------------------------------------------------------ validation from columns


def _validate_both(ns: list[Node], n_ranks: int = 4, rank: int = 0):
    """validate_rank_columns and validate_rank on the same bytes: outcome, counts, kept ctrl_deps
    and the topological order must agree."""
    from collections import Counter

    from genie.errors import ValidationError
    from genie.workload.column_checks import validate_rank_columns
    from genie.workload.graph import topological_indices
    from genie.workload.model import RankGraph
    from genie.workload.validate import validate_rank

    data = _trace(ns)
    _meta, pos, _ = _first_frame(data, "<t>", "")
    out = []
    for fast in (True, False):
        cols = decode_columns(data, pos, "<t>")
        rg = RankGraph(rank=rank, nodes=cols.to_nodes(), source="r.et")
        counts: Counter[str] = Counter()
        try:
            if fast:
                problems = validate_rank_columns(rg, cols, n_ranks, counts)
                assert "_topo_cache" in rg.__dict__
            else:
                problems = validate_rank(rg, n_ranks, counts)
        except ValidationError as exc:
            out.append(("error", str(exc)))
            continue
        kept = [n.ctrl_deps for n in rg.nodes]
        out.append((problems, +counts, kept, list(topological_indices(rg))))
    assert out[0] == out[1]
    return out[0]


def test_real_style_rank_validates_from_columns_like_validate_rank() -> None:
    from genie.workload.generators.pytorch_style import pytorch_style

    rg = pytorch_style(2, layers=4, steps=2).ranks[1]
    problems, counts, kept, topo = _validate_both(rg.nodes, n_ranks=2, rank=1)
    assert kept != [n.raw_ctrl_deps for n in rg.nodes]  # some ctrl_deps set aside
    assert counts["ctrl_deps_to_missing_ids"] > 0 and problems  # the dropped thread root
    assert topo != sorted(topo)  # forward data_deps: Kahn's order, not file order


def _chain(k: int = 6) -> list[Node]:
    return [
        Node(i, f"c{i}", NodeType.COMP_NODE, data_deps=[i - 1] if i > 1 else [], duration_micros=5)
        for i in range(1, k + 1)
    ]


def _coll(i: int, *attrs: Attr, deps=(), t=NodeType.COMM_COLL_NODE) -> Node:
    return Node(i, f"x{i}", t, data_deps=list(deps), attrs=list(attrs))


CT = Attr("comm_type", "int64_val", 0)
CS = Attr("comm_size", "int64_val", 64)
CHECKED = {
    "clean": _chain(),
    "forward and self deps, ctrl drops": [
        Node(1, "a", 4, data_deps=[3, 1], ctrl_deps=[1, 9, 2]),
        Node(2, "b", 4, ctrl_deps=[1]),
        Node(3, "c", 4, data_deps=[2]),
    ],
    "duplicate id": [*_chain(), Node(3, "dup", 4)],
    "dangling dep": [*_chain(), Node(40, "d", 4, data_deps=[99])],
    "cycle": [Node(1, "a", 4, data_deps=[2]), Node(2, "b", 4, data_deps=[1])],
    "absurd duration": [*_chain(), Node(50, "long", 4, duration_micros=10**13)],
    "collective without type": [*_chain(), _coll(60, CS)],
    "unknown comm_type": [*_chain(), _coll(61, Attr("comm_type", "int64_val", 99), CS)],
    "host launcher": [*_chain(), _coll(62, Attr("is_cpu_op", "bool_val", True))],
    "negative size": [*_chain(), _coll(63, CT, Attr("comm_size", "int64_val", -1))],
    "send to self": [
        *_chain(),
        _coll(64, Attr("comm_dst", "int32_val", 0), CS, t=NodeType.COMM_SEND_NODE),
    ],
    "string num_ops": [*_chain(), Node(65, "o", 4, attrs=[Attr("num_ops", "string_val", "x")])],
}


@pytest.mark.parametrize("what", CHECKED)
def test_rank_checks_from_columns_match_validate_rank(what: str) -> None:
    ns = CHECKED[what]
    got = _validate_both([n.copy() for n in ns])
    assert (got[0] == "error") == (
        what not in ("clean", "forward and self deps, ctrl drops", "host launcher")
    )


def test_load_defers_a_rank_error_until_every_file_is_read(tmp_path: Path, monkeypatch) -> None:
    """A validation error in rank 0 found while reading does not hide a corrupt rank 1 file."""
    from genie.errors import ValidationError
    from genie.workload import load_workload

    monkeypatch.setattr(et_codec, "COLUMNS_FROM_BYTES", 0)
    bad = [Node(1, "a", 4, data_deps=[2]), Node(2, "b", 4, data_deps=[1])]
    (tmp_path / "w.0.et").write_bytes(_trace(bad))
    (tmp_path / "w.1.et").write_bytes(_trace(_chain())[:-3])
    with pytest.raises(TraceFormatError):
        load_workload(tmp_path / "w")
    (tmp_path / "w.1.et").write_bytes(_trace(_chain()))
    with pytest.raises(ValidationError, match="cycle"):
        load_workload(tmp_path / "w")


# ------------------------------------------------------------------ whole workloads in columns


def _same_workload(path: Path, **kw) -> None:
    """load_columns(...).to_workload() is load_workload(...), node for node."""
    from genie.workload import load_workload
    from genie.workload.columnar import load_columns

    cw = load_columns(path, **kw)
    ref = load_workload(path, **kw)
    got = cw.to_workload()
    assert cw.node_count() == ref.node_count() and cw.nbytes() > 0
    assert [r.nodes for r in got.ranks] == [r.nodes for r in ref.ranks]
    assert [[n.ctrl_deps for n in r.nodes] for r in got.ranks] == [
        [n.ctrl_deps for n in r.nodes] for r in ref.ranks
    ]
    assert [r.metadata for r in got.ranks] == [r.metadata for r in ref.ranks]
    assert [r.source for r in got.ranks] == [r.source for r in ref.ranks]
    assert got.problems == ref.problems and got.dropped == ref.dropped
    assert got.groups == ref.groups and list(got.groups) == list(ref.groups)
    assert got.group_desc == ref.group_desc and got.name == ref.name


@pytest.mark.parametrize("which", ["pytorch_style", "llm", "moe", "dp"])
def test_workloads_load_into_columns_like_load_workload(which: str, tmp_path: Path) -> None:
    from genie.workload import save_workload
    from genie.workload.generators.data_parallel import data_parallel
    from genie.workload.generators.llm import llm
    from genie.workload.generators.moe import moe
    from genie.workload.generators.pytorch_style import pytorch_style

    wl = {
        "pytorch_style": lambda: pytorch_style(4, layers=4, steps=2),
        "llm": lambda: llm(8, tp=2, pp=2, layers=4),  # sends and recvs between stages
        "moe": lambda: moe(8),  # all-to-alls
        "dp": lambda: data_parallel(4),
    }[which]()
    save_workload(wl, tmp_path / "w")
    _same_workload(tmp_path / "w")


def test_shared_samples_load_into_columns_like_load_workload(et_samples: Path) -> None:
    for d in sorted({f.parent for f in et_samples.rglob("*.et")}):
        _same_workload(d)


def _write(tmp_path: Path, ranks: list[list[Node]]) -> Path:
    for r, ns in enumerate(ranks):
        (tmp_path / f"w.{r}.et").write_bytes(_trace(ns))
    return tmp_path / "w"


def _send(i: int, dst: int, size: int, t=NodeType.COMM_SEND_NODE, peer="comm_dst") -> Node:
    return _coll(i, Attr(peer, "int32_val", dst), Attr("comm_size", "int64_val", size), t=t)


def test_collective_mismatches_are_the_same_problems(tmp_path: Path) -> None:
    a = [*_chain(), _coll(10, CT, CS), _coll(11, CT, CS)]
    b = [*_chain(), _coll(10, CT, CS), _coll(11, CT, Attr("comm_size", "int64_val", 8))]
    c = [*_chain(), _coll(10, CT, Attr("pg_name", "string_val", "nobody"), CS)]
    _same_workload(_write(tmp_path, [a, b, c]))


def test_point_to_point_in_columns(tmp_path: Path) -> None:
    from genie.errors import ValidationError
    from genie.workload import load_workload
    from genie.workload.columnar import load_columns

    recv = NodeType.COMM_RECV_NODE
    ok = [[*_chain(), _send(20, 1, 64)], [*_chain(), _send(20, 0, 64, recv, "comm_src")]]
    _same_workload(_write(tmp_path, ok))
    bad = [[*_chain(), _send(20, 1, 64)], [*_chain(), _send(20, 0, 32, recv, "comm_src")]]
    p = _write(tmp_path, bad)
    with pytest.raises(ValidationError) as ref:
        load_workload(p)
    with pytest.raises(ValidationError) as got:
        load_columns(p)
    assert str(got.value) == str(ref.value) and "expects 32 B" in str(got.value)


@pytest.mark.parametrize("what", [k for k in CHECKED if k not in ("clean", "host launcher")])
def test_rank_errors_in_columns_read_as_load_workload(what: str, tmp_path: Path) -> None:
    from genie.errors import ValidationError
    from genie.workload import load_workload
    from genie.workload.columnar import load_columns

    p = _write(tmp_path, [_chain(), CHECKED[what]])
    try:
        ref = load_workload(p)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as got:
            load_columns(p)
        assert str(got.value) == str(exc)
        return
    assert ref.problems
    _same_workload(p)


def test_columns_without_the_file_bytes_read_the_file_again(tmp_path: Path) -> None:
    from genie.errors import WorkloadError
    from genie.workload import load_workload, save_workload
    from genie.workload.columnar import attr_values, load_columns
    from genie.workload.generators.llm import llm

    save_workload(llm(8, tp=2, pp=2, layers=2), tmp_path / "w")
    cw = load_columns(tmp_path / "w", keep_bytes=False)
    assert all(c.data == b"" for c in cw.ranks)  # only the columns stay
    ref = load_workload(tmp_path / "w")
    got = cw.to_workload()
    assert [r.nodes for r in got.ranks] == [r.nodes for r in ref.ranks]
    assert got.problems == ref.problems and got.groups == ref.groups
    f = tmp_path / "w.3.et"
    f.write_bytes(f.read_bytes() + b"\x00")
    with pytest.raises(WorkloadError, match="changed since it was read"):
        cw.ranks[3].to_nodes()
    # rewritten at the same size (another trace of the same shape): its time tells
    g = tmp_path / "w.4.et"
    body = g.read_bytes()
    st = g.stat()
    g.write_bytes(body)
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(WorkloadError, match="changed since it was read"):
        cw.ranks[4].to_nodes()
    with pytest.raises(WorkloadError, match="changed since it was read"):
        attr_values(cw.ranks[4], np.arange(2), "comm_size")
    # gone: one line, no OSError
    (tmp_path / "w.5.et").unlink()
    with pytest.raises(WorkloadError, match="cannot read it again"):
        cw.ranks[5].to_nodes()
    with pytest.raises(WorkloadError, match="cannot read it again"):
        attr_values(cw.ranks[5], np.arange(2), "comm_size")


def test_first_attr_names_of_one_length_are_told_apart() -> None:
    """The first attr's name is matched in numpy against the first node's: a name of the same
    length (or a derived one) must not be taken for it."""
    firsts = ["rf_id", "tid_x", "rf_id", "rf_id", "comm_size", "tag_y"]
    ns = [
        Node(
            i + 1,
            "n",
            7,
            attrs=[Attr(a, "int64_val", 7 + i), CT, Attr("comm_size", "int64_val", 5)],
        )
        for i, a in enumerate(firsts)
    ]
    cols, got, _ = _decode_both(_trace(ns))
    assert cols.fallback == {}
    assert [n.attrs[0].name for n in got] == firsts
    assert [n.comm_size for n in got] == [5] * 6


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes(), max_size=9), st.integers(1, 4))
def test_frames_decoded_in_blocks_like_et_fast(ns: list[Node], block: int) -> None:
    """Blocks of frames share names, derived tuples and attr bodies; offsets stay the file's."""
    from unittest import mock

    from genie.workload import et_columns

    ns = [n for n in ns if encode_node(n)]
    data = _trace(ns)
    with mock.patch.object(et_columns, "_BLOCK_FRAMES", block):
        _decode_both(data)


def test_real_style_trace_in_small_blocks(monkeypatch) -> None:
    from genie.workload import et_columns
    from genie.workload.generators.pytorch_style import pytorch_style

    monkeypatch.setattr(et_columns, "_BLOCK_FRAMES", 7)
    rg = pytorch_style(2, layers=4, steps=2).ranks[0]
    data = _trace(rg.nodes, rg.metadata)
    cols, got, _ = _decode_both(data)
    assert cols.fallback == {} and got == rg.nodes
    assert len(cols.names) == len({n.name for n in rg.nodes}) + 1  # interned across blocks
    assert len(set(cols.derived_table)) == len(cols.derived_table)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n),
        )
    )
)
def test_kahn_order_from_columns_is_index_order(case) -> None:
    """column_checks' Kahn (with its shortcut past the heap) orders as graph.index_order."""
    from genie.workload.column_checks import _topological
    from genie.workload.graph import index_order

    n, edges = case
    edges = [(a, b) for a, b in edges if a != b]
    deps: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        deps[a].append(b)
    row = np.array([a for a, _ in sorted(edges)], dtype=np.int64)
    pos = np.array([b for _, b in sorted(edges)], dtype=np.int64)
    assert _topological(n, row, pos) == index_order(deps)


def test_ranks_share_one_interner(tmp_path: Path) -> None:
    """Names and derived tuples of a workload's ranks are decoded once for all of them."""
    from genie.workload import save_workload
    from genie.workload.columnar import load_columns
    from genie.workload.generators.pytorch_style import pytorch_style

    wl = pytorch_style(4, layers=4, steps=2)
    save_workload(wl, tmp_path / "w")
    cw = load_columns(tmp_path / "w")
    assert all(c.names is cw.ranks[0].names for c in cw.ranks)
    assert len(cw.ranks[0].names) == len({n.name for r in wl.ranks for n in r.nodes}) + 1
    assert [c.to_nodes() for c in cw.ranks] == [r.nodes for r in wl.ranks]


def test_derived_values_equal_across_types_stay_apart() -> None:
    """0, 0.0 and False are equal in Python: their derived tuples must not be shared (the
    checks tell an int comm_size from a float one)."""
    ns = [
        _coll(1, CT, Attr("comm_size", "int64_val", 0)),
        _coll(2, CT, Attr("comm_size", "double_val", 0.0)),
        _coll(3, CT, Attr("comm_size", "bool_val", False)),
    ]
    _cols, got, _ = _decode_both(_trace(ns))
    assert [type(n.comm_size) for n in got] == [int, float, bool]
    assert _validate_both(ns)[0] == "error"  # a float comm_size, as validate_rank says


def _decode_shared(data: bytes, interner) -> None:
    """``data`` decoded in columns with a shared interner gives et_fast's nodes (or error)."""
    from genie.workload.et_columns import decode_columns as dc

    try:
        _meta, pos, _ = _first_frame(data, "<t>", "")
    except TraceFormatError:
        return
    try:
        ref, odd, zero = et_fast.decode_nodes(data, pos, "<t>")
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError) as got:
            dc(data, pos, "<t>", "", interner)
        assert str(got.value) == str(exc)
        return
    cols = dc(data, pos, "<t>", "", interner)
    assert (cols.odd, cols.zero) == (odd, zero)
    for a, b in zip(cols.to_nodes(), ref, strict=True):
        assert repr(a._d) == repr(b._d) and list(map(type, a._d)) == list(map(type, b._d))
        assert encode_node(a) == encode_node(b)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(nodes(), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=2),
)
def test_files_sharing_an_interner_decode_like_et_fast(ns, flips) -> None:
    """Runs of attr fields are decoded once per workload (Interner.sections, bounded): files
    read after others, a one-byte variant among them, still decode as et_fast alone does."""
    from unittest import mock

    from genie.workload import et_columns

    ns = [n for n in ns if encode_node(n)]
    good = _trace(ns)
    bad = bytearray(good)
    for at, byte in flips:
        bad[at % len(bad)] = byte
    interner = et_columns.Interner()
    with (
        mock.patch.object(et_columns, "_BLOCK_FRAMES", 3),
        mock.patch.object(et_columns.Interner.bound_sections, "__defaults__", (4,)),
    ):
        for data in (good, bytes(bad), good, bytes(bad)):
            _decode_shared(data, interner)
            assert len(interner.sections) <= 4 + 2 * 3  # the bound, plus one block's
            assert len(interner.section_pairs) == len(interner.section_derived)
            assert len(interner.section_derived) == len(interner.sections)


def test_real_style_ranks_share_attr_sections() -> None:
    from genie.workload import et_columns
    from genie.workload.generators.pytorch_style import pytorch_style

    wl = pytorch_style(2, layers=4, steps=2)
    interner = et_columns.Interner()
    for rg in wl.ranks:
        data = _trace(rg.nodes, rg.metadata)
        _meta, pos, _ = _first_frame(data, "<t>", "")
        got = et_columns.decode_columns(data, pos, "<t>", "", interner).to_nodes()
        assert got == rg.nodes
    # the fields after each node's per-node id repeat: a few runs for all nodes of all ranks
    assert 0 < len(interner.sections) < wl.node_count() // 5


def test_interner_sections_start_over_whole() -> None:
    """Once bounded, a run of attr fields gets its own derived tuple, never a forgotten one's."""
    from genie.workload import et_columns
    from genie.workload.et_codec import encode_attr

    def field(a: Attr) -> bytes:
        b = encode_attr(a)
        return b"\x52" + uvarint(len(b)) + b

    sized = field(Attr("comm_size", "int64_val", 5))
    plain = field(Attr("x", "string_val", "s"))
    it = et_columns.Interner()
    (i,) = it.section_indices([sized]).tolist()
    assert it.table[it.section_derived_array()[i]][DERIVED_INDEX["comm_size"]] == 5
    it.bound_sections(limit=1)
    assert not it.sections
    (j,) = it.section_indices([plain]).tolist()
    assert it.table[it.section_derived_array()[j]] == NO_DERIVED
    assert it.section_indices([plain, sized, plain]).tolist() == [j, j + 1, j]


@pytest.mark.parametrize(
    "counts",
    [[1] * 9, [1, 1, 0, 1, 3, 1, 1, 1], [0, 2, 0, 0, 1], [], [0, 0], [1], [2, 1, 1, 1, 0]],
)
def test_row_lists_are_the_rows_slices_each_a_fresh_list(counts: list[int]) -> None:
    from genie.workload.et_columns import _row_lists

    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    vals = np.arange(10, 10 + int(offsets[-1]), dtype=np.uint64)
    got = _row_lists(vals, offsets)
    v = vals.tolist()
    o = offsets.tolist()
    assert got == [v[o[i] : o[i + 1]] for i in range(len(counts))]
    assert all(type(x) is int for row in got for x in row)
    assert len({id(row) for row in got}) == len(got)
