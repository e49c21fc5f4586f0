"""Chakra's feeder JSON form (``workload_graph``) read beside the jsonizer form and .et files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.cli import main
from genie.errors import TraceFormatError
from genie.workload import load_workload, save_workload, summarize
from genie.workload.model import NodeType, Workload
from tests.test_stream_rules import pytorch_rank


def feeder_form(et_prefix: Path, out: Path) -> Path:
    """What Chakra's JSON feeder reads, written from the .et form of the same trace."""
    rg = load_workload(et_prefix).ranks[0]
    graph = []
    for n in rg.nodes:
        d: dict = {
            "Id": n.id,
            "Name": n.name,
            "NodeType": n.type,
            "runtime": n.duration_micros,
            "data_deps": list(n.data_deps),
            "is_cpu_op": n.is_cpu_op,
            "fw_tid": 3,  # a field genie does not read
        }
        if n.type == NodeType.COMM_COLL_NODE and not n.is_cpu_op:
            d.update(comm_type=n.comm_type, comm_size=n.comm_size)
        graph.append(d)
    path = out.with_name(out.name + ".0.json")
    path.write_text(json.dumps({"workload_graph": graph, "workload_name": "pt", "ngpus": 1}))
    return out


def test_feeder_json_loads_like_the_et(tmp_path: Path) -> None:
    """Same nodes, kinds, durations, collectives and inferred edges as the .et it came from."""
    save_workload(Workload([pytorch_rank(0)], name="pt"), tmp_path / "pt")
    fj = feeder_form(tmp_path / "pt", tmp_path / "fj")
    a, b = summarize(load_workload(tmp_path / "pt")), summarize(load_workload(fj))
    for key in ("nodes", "nodes_by_kind", "collectives", "compute_s_total", "stream_rules"):
        assert a[key] == b[key], key
    assert any(
        "skipped node field(s) genie does not read: fw_tid (44 nodes)" in p for p in b["problems"]
    )


def test_feeder_json_names_missing_comm_fields(tmp_path: Path) -> None:
    """Chakra's own sample has NCCL kernels without comm_type/comm_size: named, said, 0 bytes."""
    graph = [
        {
            "Id": 1,
            "Name": "c10d::allreduce_",
            "NodeType": 7,
            "runtime": 5,
            "data_deps": [],
            "is_cpu_op": True,
        },
        {
            "Id": 2,
            "Name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)",
            "NodeType": 7,
            "runtime": 50,
            "data_deps": [1],
            "is_cpu_op": False,
        },
    ]
    (tmp_path / "s.0.json").write_text(json.dumps({"workload_graph": graph}))
    wl = load_workload(tmp_path / "s")
    n = wl.ranks[0].nodes[1]
    assert (n.comm_type, n.comm_size) == (0, 0)
    assert any("comm_type taken from the NCCL kernel's name for 1" in p for p in wl.problems)


def test_unknown_json_shape_names_the_forms(tmp_path: Path, capsys) -> None:
    (tmp_path / "odd.0.json").write_text('{"graph": []}')
    with pytest.raises(TraceFormatError, match=r"feeder form \(an object with a workload_graph"):
        load_workload(tmp_path / "odd")
    assert main(["workload", "inspect", str(tmp_path / "odd")]) != 0
    assert "not a JSON form genie reads" in capsys.readouterr().err
