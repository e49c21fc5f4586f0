"""The loader asks the node decoder's memo, not every node, which process groups the nodes name
and which ranks hold METADATA nodes (``DecodeMemo.pg_names``, ``DecodeMemo.meta_nodes``).

What the memo notes must be what the nodes carry, however each node was decoded (a frame seen
before, a head seen before, a full decode, protobuf's fallback for a non-canonical frame), and a
workload must load with the groups that looking at every node gives: the world group where only
a later rank's node names it, none where no node does, and the groups of process_group:init
nodes whose frames repeat across ranks.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genie.workload import et_codec, load_workload, save_workload
from genie.workload.et_codec import _decode_columns, encode_trace, uvarint
from genie.workload.loader import _DERIVED, _PG
from genie.workload.model import Attr, IOInfo, Metadata, Node, NodeType, RankGraph, Workload
from genie.workload.process_groups import WORLD_PG_NAME

META = int(NodeType.METADATA_NODE)
PG_VALUES = [
    ("string_val", "0"),
    ("string_val", "tp3"),
    ("string_val", ""),
    ("int64_val", 0),
    ("string_list", ["0"]),
    (None, None),  # no pg_name attr
]


def _node(i: int, t: int, pg: tuple, odd: bool) -> bytes:
    """One node frame's body: type ``t``, pg_name as ``pg`` says; ``odd`` adds an unknown field
    (protobuf then reads the frame)."""
    attrs = [Attr("comm_size", "int64_val", 64)]
    if pg[0] is not None:
        attrs.append(Attr("pg_name", pg[0], pg[1]))
    body = et_codec.encode_node(Node(i, f"n{i}", t, attrs=attrs))
    return body + b"\x78\x01" if odd else body  # field 15


def _file(rows: list[tuple[int, int, bool]]) -> bytes:
    data = encode_trace(Metadata(), [])
    for i, (t, pg, odd) in enumerate(rows, 1):
        body = _node(i, t, PG_VALUES[pg], odd)
        data += uvarint(len(body)) + body
    return data


row = st.tuples(st.sampled_from([META, 4, 7]), st.integers(0, len(PG_VALUES) - 1), st.booleans())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(row, max_size=6), min_size=1, max_size=4))
def test_memo_notes_every_group_and_metadata_node(files: list[list[tuple]]) -> None:
    memo: dict = {}
    names: set = set()
    metas = 0
    for rows in files:
        _meta, got, _problems, _cols = _decode_columns(_file(rows), "<t>", "", memo)
        names |= {n._d[2] for n in got if type(n._d[2]) is not list}
        metas += sum(n.type == META for n in got)
        dm = et_codec.node_memo(memo)
        assert dm is not None and dm.meta_nodes == metas  # each one counted, repeated or not
        assert names - {""} <= dm.pg_names <= names  # every group named, none more
    assert (WORLD_PG_NAME in dm.pg_names) == any(  # what the loader asks
        WORLD_PG_NAME in map(_PG, map(_DERIVED, _decode_columns(_file(r), "<t>", "", None)[1]))
        for r in files
    )


def _coll(i: int, pg: str) -> Node:
    return Node(
        i,
        f"c{i}",
        NodeType.COMM_COLL_NODE,
        attrs=[
            Attr("comm_type", "int64_val", 0),
            Attr("comm_size", "int64_val", 1024),
            Attr("pg_name", "string_val", pg),
        ],
    )


@pytest.mark.parametrize("last", ["0", "tp"])
def test_world_group_only_where_a_later_ranks_node_names_it(tmp_path, last: str) -> None:
    ranks = [RankGraph(rank=r, nodes=[_coll(1, "tp"), _coll(2, "tp")]) for r in range(4)]
    ranks[-1].nodes[1] = _coll(2, last)  # only the last rank's last node may name group "0"
    save_workload(Workload(ranks=ranks, groups={"tp": (0, 1, 2, 3)}), tmp_path / "w")
    wl = load_workload(tmp_path / "w", validate=False)
    if last == "0":
        assert wl.groups[WORLD_PG_NAME] == (0, 1, 2, 3)
    else:
        assert WORLD_PG_NAME not in wl.groups


def _pg_init(pgs: list[dict]) -> Node:
    return Node(
        1,
        "## process_group:init ##",
        NodeType.METADATA_NODE,
        inputs=IOInfo(str([json.dumps(pgs)]), "[[]]", "['String']"),
    )


def test_process_group_nodes_repeated_on_every_rank_are_read(tmp_path) -> None:
    """A process_group:init frame that every rank repeats byte for byte (never taken from the
    frame memo, so each is counted) gives its groups; ``ranks: []`` is every rank, not every
    rank that has such a node."""
    pgs = [{"pg_name": "7", "ranks": [0, 2]}, {"pg_name": "9", "ranks": []}]
    ranks = [
        RankGraph(rank=r, nodes=[_pg_init(pgs)] if r < 2 else [_coll(1, "7")]) for r in range(3)
    ]
    ranks[2].nodes.append(_coll(2, "7"))
    save_workload(Workload(ranks=ranks, groups={}), tmp_path / "w")
    (tmp_path / "w.comm_group.json").unlink(missing_ok=True)
    wl = load_workload(tmp_path / "w", validate=False)
    assert wl.groups["7"] == (0, 2)
    assert wl.groups["9"] == (0, 1, 2)
