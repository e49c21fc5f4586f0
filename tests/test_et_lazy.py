"""The .et reader keeps each node's attr fields as checked bytes until they are read."""

from __future__ import annotations

import pytest

from genie.errors import TraceFormatError
from genie.workload.et_codec import decode_trace, decode_trace_protobuf, encode_trace
from genie.workload.model import Attr, IOInfo, Metadata, Node, NodeType


def _comm(i: int, first: Attr, size: int, pg: str = "7") -> Node:
    return Node(
        i,
        f"n{i}",
        NodeType.COMM_COLL_NODE,
        attrs=[
            first,
            Attr("comm_type", "int64_val", 2),
            Attr("comm_size", "int64_val", size),
            Attr("pg_name", "string_val", pg),
            Attr("op_schema", "string_val", "c10d::allgather_(Tensor self) -> Tensor"),
        ],
    )


def test_attrs_stay_bytes_until_read_and_derived_fields_are_set() -> None:
    ns = [_comm(i, Attr("rf_id", "int64_val", 1000 + i), 4096) for i in range(1, 40)]
    ns.append(_comm(40, Attr("comm_size", "int64_val", 5), 8192))  # the later comm_size wins
    ns.append(_comm(41, Attr("pg_name", "string_val", "x"), 64, pg="9"))
    data = encode_trace(Metadata(), ns)
    _, got, problems = decode_trace(data)
    _, ref = decode_trace_protobuf(data)
    assert problems == []
    assert all(type(n._attrs) is bytes for n in got)  # nothing decoded yet
    assert [n.comm_size for n in got] == [4096] * 39 + [8192, 64]
    assert {n.pg_name for n in got} == {"7", "9"} and got[0].comm_type == 2
    assert encode_trace(Metadata(), got) == data  # written back from the kept bytes
    assert all(type(n._attrs) is bytes for n in got)
    assert [n.attrs for n in got] == [n.attrs for n in ref] == [n.attrs for n in ns]
    assert all(type(n._attrs) is list for n in got)


def test_lazy_attrs_can_change_and_compare() -> None:
    n = _comm(1, Attr("rf_id", "int64_val", 3), 100)
    (back,) = decode_trace(encode_trace(Metadata(), [n]))[1]
    assert back == n and back.copy() == n
    back.set_attr("comm_size", "int64_val", 200)
    assert back.comm_size == 200 and back.attr("rf_id") == 3 and back != n
    assert encode_trace(Metadata(), [back]) != encode_trace(Metadata(), [n])


def test_list_attrs_are_fresh_per_node() -> None:
    ns = [
        Node(i, "c", NodeType.COMP_NODE, attrs=[Attr("involved_dim", "bool_list", [True, False])])
        for i in (1, 2)
    ]
    a, b = decode_trace(encode_trace(Metadata(), ns))[1]
    a.attrs[0].value.append(True)
    assert b.attrs[0].value == [True, False]


def test_inputs_and_outputs_stay_bytes_until_read() -> None:
    long = "x" * 200  # a two-byte string length
    ns = [
        Node(1, "a", 4, inputs=IOInfo("[[1, 2]]", "[[4]]", "['Tensor']"), outputs=IOInfo()),
        Node(2, "a", 4, inputs=IOInfo("é", "", long), outputs=IOInfo(types="ü")),
    ]
    data = encode_trace(Metadata(), ns)
    _, got, problems = decode_trace(data)
    assert problems == [] and all(type(n._inputs) is bytes for n in got)
    assert got[0].name is got[1].name  # one str per distinct name
    assert encode_trace(Metadata(), got) == data
    assert [(n.inputs, n.outputs) for n in got] == [(n.inputs, n.outputs) for n in ns]
    assert got == ns


def test_bad_utf8_in_an_ioinfo_is_still_refused() -> None:
    data = encode_trace(Metadata(), [Node(1, "a", 4, inputs=IOInfo("ab"))])
    bad = data.replace(b"ab", b"a\xff")
    with pytest.raises(TraceFormatError, match="byte offset"):
        decode_trace(bad)
