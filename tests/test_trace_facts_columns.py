"""``trace_facts`` on a workload of columns (``genie.workload.columnar``) counts host work as the
same workload's Node objects say: ranks sharing a derived table pooled (in blocks of ranks), and
ranks holding rows decoded as Nodes (``fallback``) counted apart; the Node objects' count is the
reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.api import simulation
from genie.api.simulation import trace_facts
from genie.sim.adapter import compile_workload
from genie.workload import load_workload, save_workload
from genie.workload.columnar import load_columns
from genie.workload.generators.pytorch_style import pytorch_style
from genie.workload.model import NodeKind, NodeType


def _both(tmp_path: Path):
    wl = pytorch_style(4, layers=4, steps=2, bucket_layers=2)  # host launchers: host work
    save_workload(wl, tmp_path / "w")
    cols = load_columns(tmp_path / "w")
    objs = load_workload(tmp_path / "w")
    assert all(hasattr(c, "derived_table") for c in cols.ranks)
    cw = compile_workload(objs)
    cw.host_work_nodes = None  # the workloads' own count (not the batch compile's) is tested
    return cols, objs, cw


@pytest.mark.parametrize("block", [1, 3, 1024])
def test_ranks_pooled_in_blocks_count_as_the_nodes(tmp_path, monkeypatch, block):
    cols, objs, cw = _both(tmp_path)
    monkeypatch.setattr(simulation, "_BLOCK", block)
    got, want = trace_facts(cols, cw), trace_facts(objs, cw)  # type: ignore[arg-type]
    brute = sum(n.kind is NodeKind.HOST for rg in objs.ranks for n in rg.nodes)
    assert got == want and want["host_work_nodes"] == brute > 0


def test_rows_decoded_as_nodes_count_once(tmp_path):
    cols, objs, cw = _both(tmp_path)
    want = trace_facts(objs, cw)
    # rank 1's host-work rows and one other communication row held as Nodes (``fallback``)
    rank = cols.ranks[1]
    nodes = rank.to_nodes()
    comm = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
    host = [r for r, n in enumerate(nodes) if n.kind is NodeKind.HOST]
    other = [r for r, n in enumerate(nodes) if n.type in comm and n.kind is not NodeKind.HOST]
    assert host and other
    rank.fallback = {r: nodes[r] for r in (*host[:2], other[0])}
    got = trace_facts(cols, cw)  # type: ignore[arg-type]
    assert got == want
    rank.fallback = {r: nodes[r] for r in host}  # all of them: the columns' rows count none
    assert trace_facts(cols, cw) == want  # type: ignore[arg-type]
