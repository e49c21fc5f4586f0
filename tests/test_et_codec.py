"""The Chakra ET codec: byte-exact round trips, every attr kind, cross-check with protobuf."""

from __future__ import annotations

import gzip
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genie.errors import TraceFormatError, WorkloadError
from genie.workload import et_schema
from genie.workload.et_codec import (
    decode_trace,
    decode_trace_protobuf,
    encode_attr,
    encode_node,
    encode_trace,
    read_trace,
    uvarint,
    write_trace,
)
from genie.workload.model import VALUE_KINDS, Attr, IOInfo, Metadata, Node, NodeType

# ------------------------------------------------------------------ helpers


def to_pb_attr(a: Attr, pb) -> None:
    """Fill a protobuf AttributeProto from a model Attr (the reference encoding)."""
    if a.name:
        pb.name = a.name
    if a.doc_string:
        pb.doc_string = a.doc_string
    if a.kind is None:
        return
    if a.kind.endswith("_list"):
        getattr(pb, a.kind).SetInParent()
        getattr(pb, a.kind).values.extend(a.value)
    else:
        setattr(pb, a.kind, a.value)


def to_pb_node(n: Node):
    """The protobuf Node message for a model Node."""
    m = et_schema.Node(
        id=n.id,
        name=n.name,
        type=n.type,
        ctrl_deps=n.raw_ctrl_deps,
        data_deps=n.data_deps,
        start_time_micros=n.start_time_micros,
        duration_micros=n.duration_micros,
    )
    for io, field in ((n.inputs, "inputs"), (n.outputs, "outputs")):
        if io is not None:
            getattr(m, field).SetInParent()
            getattr(m, field).values = io.values
            getattr(m, field).shapes = io.shapes
            getattr(m, field).types = io.types
    for a in n.attrs:
        to_pb_attr(a, m.attr.add())
    return m


def frame(body: bytes) -> bytes:
    return uvarint(len(body)) + body


META = frame(encode_trace(Metadata(), [])[1:])


# ------------------------------------------------------------------ shared samples


def test_every_shared_sample_round_trips_byte_exact(et_samples: Path) -> None:
    files = sorted(et_samples.rglob("*.et"))
    assert files, f"no .et files under {et_samples}"
    for f in files:
        raw = f.read_bytes()
        meta, nodes, problems = read_trace(f)
        assert problems == [], f
        assert nodes, f
        assert encode_trace(meta, nodes) == raw, f"{f} did not round-trip byte-exact"


def test_shared_sample_fields_are_read(et_samples: Path) -> None:
    f = next(et_samples.rglob("all_gather.0.et"))
    meta, nodes, _ = read_trace(f)
    assert meta.version == "0.0.4"
    (n,) = nodes
    assert n.type == NodeType.COMM_COLL_NODE
    assert n.comm_type == 2 and n.comm_size == 1048576
    assert n.attr("is_cpu_op") is False
    assert [a.kind for a in n.attrs] == ["bool_val", "int64_val", "int64_val"]


def test_gzip_input_reads_like_plain(et_samples: Path, tmp_path: Path) -> None:
    f = next(et_samples.rglob("all_reduce.1.et"))
    gz = tmp_path / "x.0.et.gz"
    gz.write_bytes(gzip.compress(f.read_bytes()))
    plain = tmp_path / "y.0.et"
    shutil.copy(f, plain)
    m1, n1, _ = read_trace(plain)
    m2, n2, _ = read_trace(gz)
    assert m1 == m2 and n1 == n2
    # gzip magic under a plain .et name is also detected
    (tmp_path / "z.0.et").write_bytes(gz.read_bytes())
    assert read_trace(tmp_path / "z.0.et")[1] == n1


# ------------------------------------------------------------------ every value kind

EXAMPLES = {
    "double": [1.5, -2.25e300, 0.0],
    "float": [0.5, -3.0, 2.0**100],
    "int32": [-(2**31), -1, 2**31 - 1],
    "int64": [-(2**63), -1, 2**63 - 1],
    "uint32": [0, 1, 2**32 - 1],
    "uint64": [0, 300, 2**64 - 1],
    "sint32": [-(2**31), -1, 2**31 - 1],
    "sint64": [-(2**63), -1, 2**63 - 1],
    "fixed32": [0, 7, 2**32 - 1],
    "fixed64": [0, 7, 2**64 - 1],
    "sfixed32": [-(2**31), 5, 2**31 - 1],
    "sfixed64": [-(2**63), 5, 2**63 - 1],
    "bool": [True, False, True],
    "string": ["", "héllo", "x" * 200],
    "bytes": [b"", b"\x00\xff", b"y" * 300],
}


@pytest.mark.parametrize("kind", VALUE_KINDS)
def test_every_attribute_value_kind_round_trips_and_matches_protobuf(kind: str) -> None:
    base, _, form = kind.rpartition("_")
    values = EXAMPLES[base]
    attrs = (
        [Attr(f"a{i}", kind, v) for i, v in enumerate(values)]
        if form == "val"
        else [Attr("l", kind, values), Attr("empty", kind, [])]
    )
    n = Node(12, "n", NodeType.COMP_NODE, attrs=attrs)
    assert encode_node(n) == to_pb_node(n).SerializeToString()
    data = encode_trace(Metadata(), [n])
    _, (back,), problems = decode_trace(data)
    assert problems == []
    assert back == n
    assert encode_trace(Metadata(), [back]) == data


def test_attr_without_value_and_with_doc_string() -> None:
    n = Node(1, "n", NodeType.COMP_NODE, attrs=[Attr("bare", None, None, "some doc")])
    assert encode_node(n) == to_pb_node(n).SerializeToString()
    _, (back,), _ = decode_trace(encode_trace(Metadata(), [n]))
    assert back.attrs == [Attr("bare", None, None, "some doc")]


def test_ioinfo_and_times_round_trip() -> None:
    n = Node(
        5,
        "mm",
        NodeType.COMP_NODE,
        data_deps=[1, 2],
        ctrl_deps=[3],
        start_time_micros=10,
        duration_micros=99,
        inputs=IOInfo("[[1,2]]", "[[4,4]]", "['float']"),
        outputs=IOInfo("", "", ""),
    )
    data = encode_trace(Metadata("0.0.4", [Attr("schema", "string_val", "x")]), [n])
    meta, (back,), problems = decode_trace(data)
    assert problems == []
    assert back == n and meta.attrs == [Attr("schema", "string_val", "x")]
    assert encode_node(n) == to_pb_node(n).SerializeToString()


def test_out_of_range_values_are_refused() -> None:
    for a in (Attr("x", "int32_val", 2**31), Attr("x", "uint64_val", -1), Attr("x", "bool_val", 1)):
        with pytest.raises(WorkloadError):
            encode_attr(a)


# ------------------------------------------------------------------ cross-check with protobuf

_FINITE = {"allow_nan": False}
SCALARS = {
    "double": st.floats(**_FINITE),
    "float": st.floats(width=32, **_FINITE),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint32": st.integers(0, 2**32 - 1),
    "uint64": st.integers(0, 2**64 - 1),
    "sint32": st.integers(-(2**31), 2**31 - 1),
    "sint64": st.integers(-(2**63), 2**63 - 1),
    "fixed32": st.integers(0, 2**32 - 1),
    "fixed64": st.integers(0, 2**64 - 1),
    "sfixed32": st.integers(-(2**31), 2**31 - 1),
    "sfixed64": st.integers(-(2**63), 2**63 - 1),
    "bool": st.booleans(),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
}


@st.composite
def attrs(draw) -> Attr:
    kind = draw(st.sampled_from(VALUE_KINDS))
    base, _, form = kind.rpartition("_")
    s = SCALARS[base]
    value = draw(s) if form == "val" else draw(st.lists(s, max_size=4))
    name = draw(st.sampled_from(["comm_type", "comm_size", "pg_name", "num_ops", "x", ""]))
    return Attr(name, kind, value, draw(st.sampled_from(["", "doc"])))


ids = st.integers(0, 2**64 - 1) | st.integers(0, 300)


@st.composite
def nodes(draw) -> Node:
    io = st.none() | st.builds(
        IOInfo, st.text(max_size=5), st.text(max_size=5), st.text(max_size=5)
    )
    return Node(
        draw(ids),
        draw(st.text(max_size=10)),
        draw(st.integers(0, 7)),
        data_deps=draw(st.lists(ids, max_size=4)),
        ctrl_deps=draw(st.lists(ids, max_size=3)),
        start_time_micros=draw(ids),
        duration_micros=draw(ids),
        inputs=draw(io),
        outputs=draw(io),
        attrs=draw(st.lists(attrs(), max_size=5)),
    )


def _same(a: Node, b: Node) -> bool:
    return encode_node(a) == encode_node(b) and a.attrs == b.attrs


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes(), max_size=6))
def test_own_codec_agrees_with_protobuf(ns: list[Node]) -> None:
    ns = [n for n in ns if encode_node(n)]  # a zero-byte node cannot be framed for Chakra
    for n in ns:
        assert encode_node(n) == to_pb_node(n).SerializeToString()
    data = encode_trace(Metadata("1.0", []), ns)
    _, fast, problems = decode_trace(data)
    _, ref = decode_trace_protobuf(data)
    assert problems == []
    assert len(fast) == len(ref) == len(ns)
    for a, b, c in zip(fast, ref, ns, strict=True):
        assert _same(a, b) and _same(a, c)
    assert encode_trace(Metadata("1.0", []), fast) == data


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes(), max_size=6))
def test_chakra_json_reads_what_protobuf_writes(ns: list[Node]) -> None:
    """chakra_jsonizer's output (protobuf's JSON of each message) reads back as the same nodes."""
    from google.protobuf import json_format

    from genie.workload.chakra_json import decode_chakra_json

    meta = et_schema.GlobalMetadata(version="0.0.4")
    text = json_format.MessageToJson(meta) + "".join(
        json_format.MessageToJson(to_pb_node(n)) for n in ns
    )
    got_meta, got, problems = decode_chakra_json(text.encode())
    assert problems == [] and got_meta.version == "0.0.4" and len(got) == len(ns)
    for a, b in zip(got, ns, strict=True):
        assert encode_node(a) == encode_node(b)  # same fields, attr kinds and values


def test_float_values_keep_their_bits() -> None:
    n = Node(1, "f", 4, attrs=[Attr("f", "float_val", 0.1), Attr("d", "double_val", -0.0)])
    _, (back,), _ = decode_trace(encode_trace(Metadata(), [n]))
    assert back.attrs[0].value == pytest.approx(0.1, rel=1e-7)  # float32 precision
    assert math.copysign(1, back.attrs[1].value) == -1


# ------------------------------------------------------------------ non-canonical input


def test_non_canonical_frames_are_read_through_protobuf_and_reported() -> None:
    # data_deps unpacked (field 5 varint twice), then an unknown field 15
    body = b"\x08\x07" + b"\x28\x01\x28\x02" + b"\x78\x05"
    _, (n,), problems = decode_trace(META + frame(body))
    assert n.id == 7 and n.data_deps == [1, 2]
    assert any("non-canonical" in p for p in problems)


def test_zero_length_node_frame_is_reported() -> None:
    good = frame(encode_node(Node(3, "a", 4)))
    _, ns, problems = decode_trace(META + b"\x00" + good)
    assert [n.id for n in ns] == [0, 3]
    assert any("zero-length" in p for p in problems)


# ------------------------------------------------------------------ corrupt and truncated input


def test_truncated_frame_names_file_and_offset(tmp_path: Path) -> None:
    good = frame(encode_node(Node(1, "a", 4, duration_micros=5)))
    data = META + good + good[:-3]
    p = tmp_path / "t.0.et"
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    msg = str(e.value)
    assert str(p) in msg and f"byte offset {len(META) + len(good)}" in msg and "truncated" in msg


def test_truncated_length_varint(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(META + b"\x85")
    with pytest.raises(TraceFormatError, match=f"byte offset {len(META)}"):
        read_trace(p)


def test_corrupt_frame_names_offset(tmp_path: Path) -> None:
    good = frame(encode_node(Node(1, "a", 4)))
    bad = frame(b"\x12\x09abc")  # string length runs past the frame
    p = tmp_path / "c.0.et"
    p.write_bytes(META + good + bad + good)
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    assert str(p) in str(e.value) and f"byte offset {len(META) + len(good)}" in str(e.value)
    assert "corrupt" in str(e.value)


def test_corrupt_metadata_and_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "m.0.et"
    p.write_bytes(frame(b"\x0a\x05ab"))
    with pytest.raises(TraceFormatError, match="GlobalMetadata"):
        read_trace(p)
    p.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty file"):
        read_trace(p)


def test_corrupt_gzip(tmp_path: Path) -> None:
    p = tmp_path / "g.0.et.gz"
    p.write_bytes(gzip.compress(b"hello" * 50)[:20])
    with pytest.raises(TraceFormatError, match="gzip"):
        read_trace(p)


def test_write_trace_gz_and_plain(tmp_path: Path) -> None:
    ns = [Node(i + 1, f"n{i}", 4, duration_micros=i + 1) for i in range(10)]
    for name in ("w.0.et", "w.0.et.gz"):
        write_trace(tmp_path / name, Metadata(), ns)
        assert read_trace(tmp_path / name)[1] == ns
    assert (tmp_path / "w.0.et.gz").read_bytes()[:2] == b"\x1f\x8b"


def test_empty_metadata_is_never_written() -> None:
    data = encode_trace(Metadata("", []), [])
    assert data[0] > 0  # Chakra's reader would stop at a zero-length first frame


# ------------------------------------------------------------------ fuzz: corrupt bytes


def _try(fn, data):
    try:
        return True, fn(data)
    except Exception as exc:  # the reference reader raises protobuf's own errors
        return False, exc


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(nodes(), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 10**6),
)
def test_corrupted_streams_fail_cleanly_or_read_like_protobuf(ns, flips, cut) -> None:
    ns = [n for n in ns if encode_node(n)]
    data = bytearray(encode_trace(Metadata("1.0", []), ns))
    for at, byte in flips:
        data[at % len(data)] = byte
    data = bytes(data[: max(1, len(data) - cut % 4)])
    ok_fast, fast = _try(decode_trace, data)
    ok_ref, ref = _try(decode_trace_protobuf, data)
    if ok_fast:
        assert ok_ref, f"fast reader accepted what protobuf rejects: {ref!r}"
        assert [encode_node(n) for n in fast[1]] == [encode_node(n) for n in ref[1]]
        assert [n.attrs for n in fast[1]] == [n.attrs for n in ref[1]]
    else:
        assert isinstance(fast, TraceFormatError), repr(fast)
        assert not ok_ref, f"protobuf reads what the fast reader rejects: {fast}"
        assert "byte offset" in str(fast) or "empty file" in str(fast), str(fast)


# ------------------------------------------------------------------ no encoding on the read path

CANONICAL_ATTRS = [
    Attr("a", "int64_val", -5),
    Attr("a", "int64_val", 0),
    Attr("b", "int32_val", -(1 << 31)),
    Attr("c", "uint32_val", (1 << 32) - 1),
    Attr("d", "sint64_val", -77),
    Attr("e", "bool_val", True),
    Attr("f", "double_val", -0.0),
    Attr("g", "string_val", "é", "doc"),
    Attr("h", "bytes_val", b"\x00\xff"),
    Attr("", "fixed64_val", 7),
    Attr("only_name", None, None),
]


@pytest.mark.parametrize("a", CANONICAL_ATTRS, ids=lambda a: a.kind or "none")
def test_canonical_attrs_decode_strictly_without_re_encoding(a):
    from genie.workload.et_fast import _decode_attr

    body = encode_attr(a)
    got = _decode_attr(body)
    assert (got.name, got.kind, got.doc_string) == (a.name, a.kind, a.doc_string)
    assert got.value == a.value or (math.isnan(got.value) and math.isnan(a.value))
    pb = et_schema.AttributeProto()
    pb.ParseFromString(body)
    assert pb.SerializeToString() == body  # what the strict decoder accepts is canonical


@pytest.mark.parametrize(
    "body",
    [
        b"\x0a\x01a" + b"\x48\x85\x00",  # int64 varint padded with a zero byte
        b"\x48\x05" + b"\x0a\x01a",  # value before the name
        b"\x0a\x01e" + b"\xd8\x01\x02",  # bool 2
        b"\x0a\x01a" + b"\x48\x05" + b"\xf8\x07\x01",  # an unknown field 127
        b"\x0a\x01b" + b"\x38" + uvarint(1 << 40),  # int32 out of range
        b"\x0a\x00" + b"\x48\x05",  # an empty name written out
        b"\x0a\x01a" + b"\x48\x05\x48\x06",  # two values
    ],
)
def test_non_canonical_attr_bytes_leave_the_strict_decoder(body):
    from genie.workload.et_fast import _decode_attr, _Fallback

    with pytest.raises(_Fallback):
        _decode_attr(body)
    # read in a node, protobuf's parser takes the frame and the problem is reported
    node = encode_node(Node(1, "n", 4)) + b"\x52" + uvarint(len(body)) + body
    _, (n,), problems = decode_trace(META + frame(node))
    assert n.id == 1 and any("non-canonical" in p for p in problems)


def test_identical_metadata_frames_decode_once_but_stay_separate(tmp_path, monkeypatch):
    from genie.workload import et_codec

    meta = Metadata(attrs=[Attr("pg_ranks:tp", "int64_list", [0, 1]), Attr("x", "int64_val", 3)])
    for r in range(3):
        write_trace(tmp_path / f"m.{r}.et", meta, [Node(1, "n", 4)])
    parsed = []
    real = et_codec._canonical_attr  # canonical attrs are read without protobuf
    monkeypatch.setattr(et_codec, "_canonical_attr", lambda b: parsed.append(1) or real(b))
    memo: dict = {}
    metas = [read_trace(tmp_path / f"m.{r}.et", memo)[0] for r in range(3)]
    assert len(parsed) == 2  # each attr decoded once for the three files
    assert metas[0].attrs[0] is metas[2].attrs[0]
    assert all(m.attrs == meta.attrs for m in metas)
    metas[0].attrs.append(Attr("y", "int64_val", 1))  # each rank's list is its own
    assert metas[1].attrs == meta.attrs
    # a non-canonical frame is reported for every file that has it, memo or not
    body = encode_trace(meta, [])[1:] + b"\x78\x01"  # an unknown field 15
    (tmp_path / "odd.0.et").write_bytes(frame(body))
    (tmp_path / "odd.1.et").write_bytes(frame(body))
    for r in range(2):
        problems = read_trace(tmp_path / f"odd.{r}.et", memo)[2]
        assert any(f"odd.{r}.et" in p and "non-canonical" in p for p in problems)


def test_value_field_numbers_are_the_schemas() -> None:
    from genie.workload import et_fast

    assert {k: n for k, n, _l, _t in et_schema.SCALAR_KINDS} == et_fast.VALUE_FIELD


def test_open_bytes_reads_whole_files_and_names_what_fails(tmp_path: Path) -> None:
    import os
    import threading

    from genie.workload.et_codec import open_bytes

    data = bytes(range(256)) * 4099
    f = tmp_path / "t.0.et"
    f.write_bytes(data)
    assert open_bytes(f) == (data, "")
    (tmp_path / "e.0.et").write_bytes(b"")
    assert open_bytes(tmp_path / "e.0.et") == (b"", "")
    (tmp_path / "g.0.et").write_bytes(gzip.compress(data))
    assert open_bytes(tmp_path / "g.0.et") == (data, " (offset in the decompressed stream)")
    # a pipe has no size: read to its end all the same
    fifo = tmp_path / "p.0.et"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    assert open_bytes(fifo) == (data, "")
    writer.join()
    (tmp_path / "d.0.et").mkdir()
    with pytest.raises(WorkloadError, match=r"d.0.et: cannot read: Is a directory"):
        open_bytes(tmp_path / "d.0.et")
    with pytest.raises(WorkloadError, match=r"x.0.et: cannot read: No such file or directory"):
        open_bytes(tmp_path / "x.0.et")


def test_chakra_json_keeps_the_sign_of_a_zero_read_after_a_plus_zero() -> None:
    """The JSON reader's attr memo keys a float by its sign too (-0.0 == 0.0 and hashes alike):
    a node with 0.0 read first must not turn a later -0.0 of the same name into 0.0."""
    from genie.workload.chakra_json import decode_chakra_json

    text = '{"version": "0.0.4"}'
    for i, v in enumerate(("0.0", "-0.0")):
        text += f'{{"id": "{i + 1}", "name": "n", "type": "COMP_NODE", "attr": '
        text += f'[{{"name": "z", "doubleVal": {v}}}]}}'
    _, (a, b), problems = decode_chakra_json(text.encode())
    assert problems == []
    assert math.copysign(1, a.attrs[0].value) == 1 and math.copysign(1, b.attrs[0].value) == -1


@pytest.mark.parametrize(
    ("field", "canonical", "padded"),
    [
        ("start time", b"\x30\x01", b"\x30\x81\x00"),
        ("name length", b"\x12\x01x", b"\x12\x81\x00x"),
        ("duration", b"\x38\x05", b"\x38\x85\x80\x00"),
    ],
)
def test_a_padded_varint_reads_its_value_and_counts_as_not_canonical(
    field: str, canonical: bytes, padded: bytes
) -> None:
    # protobuf reads a varint padded with continuation bytes as its value; genie's decoders
    # read it too, but count the frame as not canonical (its round trip is not byte-exact)
    from genie.workload import et_fast
    from genie.workload.et_codec import encode_node, uvarint
    from genie.workload.et_columns import decode_columns
    from genie.workload.et_memo import DecodeMemo

    n = Node(1, "x", NodeType.COMP_NODE, start_time_micros=1, duration_micros=5)
    body = encode_node(n)
    assert canonical in body, field
    odd_body = body.replace(canonical, padded, 1)
    for b, want_odd in ((body, 0), (odd_body, 1)):
        data = uvarint(len(b)) + b
        for memo in (None, DecodeMemo()):
            nodes, odd, _zero = et_fast.decode_nodes(data, 0, "<t>", memo=memo)
            got = nodes[0]
            assert (got.name, got.start_time_micros, got.duration_micros) == ("x", 1, 5)
            assert odd == want_odd, (field, memo)
        assert decode_columns(data, 0, "<t>", "", None).odd == want_odd, field
