"""The read memo shared by one workload's rank files gives what a fresh decode gives.

Node frames (``et_fast.DecodeMemo``) and GlobalMetadata attrs (``et_codec.MetadataAttrs``) that
repeat across ranks are decoded once; every file read with the memo must come out as it does
read alone: node for node, field for field, the same problems and the same errors, whatever
came before it (frames that differ in one byte, corrupt frames, non-canonical ones). And the
memo stays bounded.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genie.errors import TraceFormatError
from genie.workload import et_codec, et_fast, et_memo
from genie.workload.et_codec import _decode_columns, encode_trace, uvarint
from genie.workload.model import Attr, IOInfo, Metadata, Node, NodeType
from tests.test_et_codec import nodes

_SLOTS = (
    "id",
    "name",
    "type",
    "raw_ctrl_deps",
    "ctrl_deps",
    "data_deps",
    "start_time_micros",
    "duration_micros",
    "_inputs",
    "_outputs",
    "_attrs",
    "_d",
)


def _fields(n: Node) -> tuple:
    """Every raw field of a node as read (attrs and IOInfo as kept), with the value types
    (0, 0.0 and False are equal but validate differently) and NaN-proof (by repr)."""
    vals = tuple(getattr(n, s) for s in _SLOTS)
    return repr(vals), tuple(map(type, vals)), tuple(map(type, n._d))


def _read(data: bytes, memo: dict | None, source: str = "<t>") -> tuple:
    """What reading ``data`` gives: (version, attrs, node fields, problems) or the error text."""
    try:
        meta, got, problems, _cols = _decode_columns(data, source, "", memo)
    except TraceFormatError as exc:
        return ("error", str(exc))
    attrs = repr(meta.attrs), [type(a.value) for a in meta.attrs]
    return meta.version, attrs, [_fields(n) for n in got], problems


def _assert_reads_alone(files: list[bytes], memo: dict) -> None:
    """Each file read with ``memo`` (in order) reads as it does alone."""
    for k, data in enumerate(files):
        assert _read(data, memo) == _read(data, None), k


def _rank(r: int, tp: int = 2) -> tuple[Metadata, list[Node]]:
    """A generated-style rank: compute nodes alike on every rank, collectives naming the
    rank's tp group (one byte differs between groups), a send naming the rank's peer."""
    group = str(r // tp)
    ns: list[Node] = []
    for i in range(1, 40, 2):
        ns.append(
            Node(
                i,
                f"fwd_L{i}",
                NodeType.COMP_NODE,
                data_deps=[i - 1] if i > 1 else [],
                duration_micros=452,
                attrs=[Attr("is_cpu_op", "bool_val", False), Attr("num_ops", "int64_val", 10**9)],
            )
        )
        ns.append(
            Node(
                i + 1,
                f"fwd_L{i}_allreduce",
                NodeType.COMM_COLL_NODE,
                data_deps=[i],
                ctrl_deps=[i] if i % 3 == 0 else [],
                attrs=[
                    Attr("comm_type", "int64_val", 0),
                    Attr("comm_size", "int64_val", 1 << 24),
                    Attr("pg_name", "string_val", group),
                ],
            )
        )
    ns.append(
        Node(
            41,
            "send",
            NodeType.COMM_SEND_NODE,
            data_deps=[40],
            inputs=IOInfo("[[1]]", "[[4096]]", "['Tensor']"),
            attrs=[Attr("comm_dst", "int64_val", (r + 1) % 8), Attr("comm_size", "int64_val", 64)],
        )
    )
    members = list(range(group_start := r - r % tp, group_start + tp))
    meta = Metadata(
        "0.0.4",
        [
            Attr("generator", "string_val", "test"),
            Attr(f"pg_ranks:{group}", "int64_list", members),
            Attr("pg_ranks:dp", "int64_list", list(range(0, 64, 2))),
        ],
    )
    return meta, ns


def test_ranks_sharing_frames_read_as_alone_and_share_the_decode() -> None:
    files = [encode_trace(*_rank(r)) for r in range(8)]
    memo: dict = {}
    _assert_reads_alone(files, memo)
    node_memo = memo[et_codec._NODE_MEMO]
    # compute frames repeat on every rank, collectives within a tp pair: most frames hit
    assert node_memo.hits > node_memo.misses > 0
    assert node_memo.frames_on
    # a collective of another tp group: the same fields before its attrs, read from its head
    assert node_memo.head_hits >= 20 * 3 and node_memo.heads_on
    # metadata: each rank's frame differs, the dp group's attr is one object for all ranks
    metas = [_decode_columns(f, "<t>", "", memo)[0] for f in files]
    assert len({id(m.attrs[2]) for m in metas}) == 1
    assert metas[0].attrs[1] is metas[1].attrs[1] and metas[0].attrs[1] is not metas[2].attrs[1]


def test_nodes_from_the_memo_are_fresh_per_rank() -> None:
    files = [encode_trace(*_rank(r)) for r in (0, 1, 0)]
    memo: dict = {}
    a = _decode_columns(files[0], "<t>", "", memo)[1]
    b = _decode_columns(files[1], "<t>", "", memo)[1]
    assert memo[et_codec._NODE_MEMO].hits >= len(b) - 1  # rank 1 repeats rank 0 but its send
    for x, y in zip(a, b, strict=True):
        assert x is not y and x.data_deps is not y.data_deps
        assert x.ctrl_deps is x.raw_ctrl_deps and x.ctrl_deps is not y.ctrl_deps
        assert type(x._attrs) is bytes  # kept as the checked bytes, decoded when read
    for n in a:  # change rank 0's nodes: neither rank 1 nor a later read sees it
        n.data_deps.append(99)
        n.raw_ctrl_deps.append(98)
        n.set_attr("comm_size", "int64_val", 7)
    c = _decode_columns(files[2], "<t>", "", memo)[1]
    assert [_fields(n) for n in c] == [_fields(n) for n in _decode_columns(files[2], "t", "")[1]]
    assert 99 not in b[5].data_deps and b[5].comm_size != 7


def _one_byte_variants(data: bytes) -> list[bytes]:
    """``data`` with one node-frame byte changed, at several places (some still decode, some
    are corrupt, some become non-canonical)."""
    _, start, _end = et_codec.split_frames(data, "<t>")[1]
    out = []
    for at in range(start, len(data), max(1, (len(data) - start) // 40)):
        for new in (data[at] ^ 1, 0x80, 0x00, 0xFF):
            out.append(data[:at] + bytes([new]) + data[at + 1 :])
    return out


def test_frames_differing_in_one_byte_or_corrupt_read_as_alone() -> None:
    good = encode_trace(*_rank(0))
    variants = _one_byte_variants(good)
    assert any(_read(v, None)[0] == "error" for v in variants)  # some are corrupt
    assert any("non-canonical" in " ".join(_read(v, None)[-1]) for v in variants)
    memo: dict = {}
    # the good file first (its frames memoised), then each variant, then the good one again
    _assert_reads_alone([good, *variants, good], memo)
    # and a corrupt file first: nothing of it may be memoised as good
    memo = {}
    _assert_reads_alone([*reversed(variants), good, *variants], memo)


def _heads_only() -> dict:
    """A read memo whose node memo finds frames by their heads only (no whole frames)."""
    node_memo = et_memo.DecodeMemo()
    node_memo.frames_on = False
    return {et_codec._NODE_MEMO: node_memo}


def test_frames_read_from_their_heads_read_as_alone() -> None:
    files = [encode_trace(*_rank(r)) for r in range(6)]
    memo = _heads_only()
    _assert_reads_alone(files, memo)
    node_memo = memo[et_codec._NODE_MEMO]
    assert node_memo.head_hits == 5 * 41 and node_memo.hits == 0  # every frame of ranks 1..5
    good = files[0]
    variants = _one_byte_variants(good)
    # a head seen before, then attrs (or other fields) that differ, are corrupt or odd
    _assert_reads_alone([good, *variants, good], _heads_only())
    _assert_reads_alone([*reversed(variants), good, *variants], _heads_only())


def test_a_head_followed_by_more_fields_is_not_taken_for_the_whole_head() -> None:
    # rank 0's node ends after its name; rank 1's goes on with a type and attrs, rank 2's with
    # attrs alone; then one with a field that is out of order (protobuf reads it)
    a = Node(3, "n", NodeType.INVALID_NODE)
    b = Node(3, "n", NodeType.COMP_NODE, attrs=[Attr("num_ops", "int64_val", 5)])
    c = Node(3, "n", attrs=[Attr("comm_size", "int64_val", 9)])
    files = [encode_trace(Metadata(), [x]) for x in (a, b, c, a, c)]
    odd = et_codec.encode_node(c) + b"\x18\x04"  # the type after the attrs: not canonical
    files.append(encode_trace(Metadata(), []) + uvarint(len(odd)) + odd)
    for memo in ({}, _heads_only()):
        _assert_reads_alone(files, memo)
    got = [_read(f, None)[2][0] for f in files[:3]]
    assert len(set(got)) == 3


def test_heads_are_bounded() -> None:
    node_memo = et_memo.DecodeMemo(max_frames=30)
    node_memo.frames_on = False
    memo = {et_codec._NODE_MEMO: node_memo}
    for r in range(40):  # every rank's node 1 has another name: a row of many heads
        ns = [Node(1, f"r{r}", NodeType.COMP_NODE), Node(2, "x", NodeType.COMP_NODE)]
        data = encode_trace(Metadata(), ns)
        assert _read(data, memo) == _read(data, None)
        assert len(node_memo.heads[0]) <= et_memo.HEADS_PER_ROW
        assert node_memo.head_count == sum(map(len, node_memo.heads)) <= 30
    assert node_memo.head_hits == 39  # node 2 of every rank after the first


def test_non_canonical_frames_are_reported_on_every_rank() -> None:
    body = et_codec.encode_node(Node(5, "n", NodeType.COMP_NODE)) + b"\x78\x01"  # field 15
    data = encode_trace(Metadata(), [Node(1, "a", NodeType.COMP_NODE)]) + uvarint(len(body))
    data += body
    memo: dict = {}
    for _ in range(3):
        *_, problems = _read(data, memo)
        assert any("non-canonical" in p for p in problems)
    _assert_reads_alone([data, data], memo)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(nodes(), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 4),
)
def test_any_nodes_and_corruptions_read_as_alone(ns, flips, which) -> None:
    ns = [n for n in ns if et_codec.encode_node(n)]
    good = encode_trace(Metadata("0.0.4", [Attr("x", "int64_list", [1, 2])]), ns)
    bad = bytearray(good)
    for at, byte in flips:
        bad[at % len(bad)] = byte
    files = [good, bytes(bad), good, bytes(bad)]
    _assert_reads_alone(files[which % 2 :], {} if which < 2 else _heads_only())


def test_metadata_attrs_read_as_alone() -> None:
    meta = Metadata(
        "0.0.4", [Attr("pg_ranks:1", "int64_list", [0, 1]), Attr("s", "string_val", "x")]
    )
    good = encode_trace(meta, [Node(1, "n", 4)])
    head = et_codec.split_frames(good, "<t>")[0]
    variants = []
    for at in range(head[0], head[2]):
        for new in (good[at] ^ 1, 0x80, 0xFF):
            variants.append(good[:at] + bytes([new]) + good[at + 1 :])
    # an attr with an unknown field: read, but not canonical
    odd_attr = et_codec.encode_attr(Attr("y", "int64_val", 3)) + b"\x78\x01"
    odd_body = good[head[1] : head[2]] + b"\x12" + uvarint(len(odd_attr)) + odd_attr
    variants.append(uvarint(len(odd_body)) + odd_body + good[head[2] :])
    # an empty version written out, a version after the attrs: protobuf reads them
    body = good[head[1] : head[2]]
    for b in (b"\n\x00" + body[7:], body[7:] + body[:7]):
        variants.append(uvarint(len(b)) + b + good[head[2] :])
    memo: dict = {}
    _assert_reads_alone([good, *variants, good], memo)
    assert any("non-canonical" in " ".join(_read(v, None)[-1]) for v in variants)
    assert any(_read(v, None)[0] == "error" for v in variants)


def test_frame_memo_is_bounded() -> None:
    ns = [Node(i, f"n{i}", NodeType.COMP_NODE, duration_micros=i) for i in range(1, 400)]
    data = encode_trace(Metadata(), ns)
    _, pos, _ = et_codec._first_frame(data, "<t>", "")
    memo = et_fast.DecodeMemo(max_frames=50, max_bytes=10_000)
    for _ in range(3):
        got, _, _ = et_fast.decode_nodes(data, pos, "<t>", memo=memo)
        assert len(memo.frames) <= 50 and memo.frame_bytes <= 10_000
        assert memo.frame_bytes == sum(map(len, memo.frames))
        assert [_fields(n) for n in got] == [
            _fields(n) for n in et_fast.decode_nodes(data, pos, "<t>")[0]
        ]
    memo = et_fast.DecodeMemo(max_frames=1000, max_bytes=100)
    et_fast.decode_nodes(data, pos, "<t>", memo=memo)
    assert memo.frame_bytes <= 100


def test_frame_memo_lets_go_when_frames_do_not_repeat(monkeypatch) -> None:
    monkeypatch.setattr(et_memo, "_FRAME_PROBE", 500)
    memo: dict = {}
    for r in range(6):  # every frame new (ids per rank)
        ns = [Node(r * 1000 + i, "n", NodeType.COMP_NODE) for i in range(1, 200)]
        data = encode_trace(Metadata(), ns)
        assert _read(data, memo) == _read(data, None)
    node_memo = memo[et_codec._NODE_MEMO]
    assert not node_memo.frames_on and not node_memo.frames and node_memo.frame_bytes == 0
    assert node_memo.misses <= 600  # no lookups once it gave up
    # the heads (the fields before the attrs) differ too: given up as well
    assert not node_memo.heads_on and not node_memo.heads and node_memo.head_count == 0
    assert node_memo.head_misses <= 600


def test_metadata_attr_memo_is_bounded() -> None:
    known = et_codec.MetadataAttrs(max_entries=3, max_bytes=math.inf)  # type: ignore[arg-type]
    memo: dict = {et_codec._META_ATTRS: known}
    files = [
        encode_trace(Metadata("v", [Attr(f"a{r}", "int64_list", [r] * 5)]), [Node(1, "n", 4)])
        for r in range(10)
    ]
    _assert_reads_alone(files, memo)
    assert len(known.attrs) <= 3
    known = et_codec.MetadataAttrs(max_entries=100, max_bytes=30)
    memo = {et_codec._META_ATTRS: known}
    _assert_reads_alone(files, memo)
    assert known.held <= 30 and known.held == sum(map(len, known.attrs))


@pytest.mark.parametrize("ranks", [16])
def test_loaded_workload_reads_as_its_files_alone(tmp_path, ranks: int) -> None:
    from genie.workload import load_workload, save_workload
    from genie.workload.generators.llm import llm

    save_workload(llm(ranks, tp=2, pp=2, layers=2), tmp_path / "w")
    wl = load_workload(tmp_path / "w", validate=False)
    for rg in wl.ranks:
        meta, alone, _problems = et_codec.read_trace(tmp_path / f"w.{rg.rank}.et")
        assert [_fields(n) for n in rg.nodes] == [_fields(n) for n in alone]
        assert rg.metadata.attrs == meta.attrs and rg.metadata.version == meta.version


@settings(max_examples=150, deadline=None)
@given(
    st.text(max_size=6),
    st.text(max_size=3),
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=6),
    st.sampled_from(["int64_list", "int32_list", "uint64_list", "string_val", "int64_val"]),
    st.integers(0, 40),
)
def test_metadata_attrs_read_without_protobuf_read_as_protobuf_reads(
    name, doc, values, kind, flip
) -> None:
    if kind == "int32_list":
        values = [v % (1 << 31) for v in values]
    elif kind == "uint64_list":
        values = [v % (1 << 64) for v in values]
    value = {"string_val": name * 2, "int64_val": values[0] if values else 7}.get(kind, values)
    good = encode_trace(Metadata("0.0.4", [Attr(name, kind, value, doc)]), [Node(1, "n", 4)])
    bad = bytearray(good)
    bad[3 + flip % max(1, good[0] - 3)] ^= 0x01 << (flip % 8)  # one bit of the attr's bytes
    _assert_reads_alone([good, bytes(bad), good], {})
    a = Attr(name, kind, value, doc)
    got = et_codec._canonical_attr(et_codec.encode_attr(a))
    assert (got == a) if kind in ("int64_list", "string_val", "int64_val") else got is None
