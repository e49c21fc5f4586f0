"""Compiling a workload held as columns (``genie.sim.columns_compile``) against compiling its
object model, array for array.

Each workload is written as .et files, read with ``load_columns``, and compiled both from the
columns and from ``ColumnarWorkload.to_workload()`` through the node-by-node reference; the
results must be identical (generated dp/llm/moe with all-to-all-v, PyTorch-style ranks with
stream rules and ids that are not positions, deps on missing ids and on the node itself, the
real ASTRA-sim samples). The columns path must not decline these, and ``compile_workload``
must take it for a ColumnarWorkload.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sim_compile_batch import ROOFLINE, SAMPLES, TRACE, same

from genie.sim import adapter
from genie.sim.adapter import A2A, ComputeModel, _fields, compile_reference, compile_workload
from genie.sim.columns_compile import compile_columns
from genie.workload import save_workload
from genie.workload.columnar import load_columns
from genie.workload.et_columns import NodeColumns
from genie.workload.generators.data_parallel import data_parallel
from genie.workload.generators.llm import llm
from genie.workload.generators.moe import moe
from genie.workload.generators.pytorch_style import pytorch_style


def columns(cw, compute: ComputeModel, edges: str):
    """The columns path alone (None would mean it declined)."""
    roof = compute.mode == "roofline"
    return compile_columns(cw, edges, lambda nd, r, g: _fields(nd, r, compute, roof, g), A2A)


def check(
    prefix: Path, compute: ComputeModel = TRACE, edges: str = "inferred", validate: bool = True
) -> None:
    cw = load_columns(prefix, validate=validate)
    ref = compile_reference(cw.to_workload(), compute, edges)
    got = columns(cw, compute, edges)
    assert got is not None, "the columns path declined a workload it should compile"
    same(ref, got)


def _messy(wl):
    for rg in wl.ranks:
        a = rg.nodes[3]
        a.data_deps = [*a.data_deps, a.id, 10**6]  # self and missing: dropped alike
    return wl


@pytest.mark.parametrize("compute", [TRACE, ROOFLINE], ids=["trace", "roofline"])
@pytest.mark.parametrize("edges", ["inferred", "explicit"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: data_parallel(8, layers=4),
        lambda: llm(16, tp=2, pp=2, layers=4),
        lambda: moe(8, expert_skew=1.2),  # all-to-all-v: per-peer sizes
        lambda: pytorch_style(4, layers=4, steps=2),
        lambda: _messy(pytorch_style(4, layers=2)),
        lambda: _messy(data_parallel(4, layers=2)),
    ],
    ids=["dp", "llm", "moe-uneven", "pytorch-style", "pytorch-messy", "dp-messy"],
)
def test_columns_compile_as_the_object_model_does(tmp_path, make, edges, compute, request):
    save_workload(make(), tmp_path / "w")
    messy = "messy" in request.node.callspec.id  # validation refuses a dangling dep
    check(tmp_path / "w", compute, edges, validate=not messy)


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_real_astra_samples_from_columns(coll):
    if not SAMPLES.is_dir():
        pytest.skip(f"the real samples are not at {SAMPLES}")
    check(SAMPLES / "astra-sim" / "microbenchmarks" / coll / "4npus_1MB")


def test_compile_workload_takes_the_columns_path(tmp_path, monkeypatch):
    save_workload(llm(8, tp=2, pp=2, layers=2), tmp_path / "w")
    cw = load_columns(tmp_path / "w")
    called = []

    def no_objects(*a, **k):
        called.append(1)
        raise AssertionError("the object path ran")

    monkeypatch.setattr(adapter, "compile_reference", no_objects)
    monkeypatch.setattr(type(cw), "to_workload", no_objects)
    got = compile_workload(cw)
    monkeypatch.undo()
    assert not called
    same(compile_workload(load_columns(tmp_path / "w").to_workload()), got)


@pytest.mark.parametrize("ranks,layers,steps", [(2, 2, 1), (8, 6, 3)])
def test_pytorch_style_compiles_without_node_objects(tmp_path, monkeypatch, ranks, layers, steps):
    """Stream rules from the columns (file bytes dropped): no rank is made as Node objects,
    and the arrays are those of the object model's compile, the rules' edges included."""
    save_workload(pytorch_style(ranks, layers=layers, steps=steps), tmp_path / "w")
    wl = load_columns(tmp_path / "w").to_workload()
    ref = compile_reference(wl, TRACE, "inferred")
    assert (
        ref.ranks[0].dep_idx.size > compile_reference(wl, TRACE, "explicit").ranks[0].dep_idx.size
    )
    cw = load_columns(tmp_path / "w", keep_bytes=False)

    def no_objects(*a, **k):
        raise AssertionError("a rank was made as Node objects")

    monkeypatch.setattr(NodeColumns, "to_nodes", no_objects)
    got = columns(cw, TRACE, "inferred")
    assert got is not None, "the columns path declined a PyTorch-style trace"
    same(ref, got)


def _without_wall(doc):
    if isinstance(doc, dict):
        return {k: _without_wall(v) for k, v in doc.items() if "wall" not in k}
    if isinstance(doc, list):
        return [_without_wall(v) for v in doc]
    return doc


@pytest.mark.parametrize(
    "make",
    [lambda: pytorch_style(4, layers=4, steps=2), lambda: llm(16, tp=2, pp=2, layers=4)],
    ids=["pytorch-style", "llm"],
)
def test_simulate_takes_columns_past_the_threshold(tmp_path, monkeypatch, capsys, make):
    """``genie simulate`` of a trace past ``COLUMNS_BYTES`` reads it into columns and prints
    the --json it prints from Node objects (wall times aside)."""
    import json

    from genie.cli import main
    from genie.workload import columnar

    save_workload(make(), tmp_path / "w")
    args = ["simulate", str(tmp_path / "w"), "--json", "--rows", "0"]
    assert main(args) == 0
    ref = json.loads(capsys.readouterr().out)
    loaded = []
    real = columnar.load_columns

    def spy(*a, **k):
        loaded.append(1)
        return real(*a, **k)

    monkeypatch.setattr(columnar, "load_columns", spy)
    monkeypatch.setattr(adapter, "COLUMNS_BYTES", 0)
    monkeypatch.setattr(NodeColumns, "to_nodes", lambda *a: pytest.fail("Node objects made"))
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)
    assert loaded, "the columns path was not taken"
    assert _without_wall(got) == _without_wall(ref)


def test_a_collective_of_an_unknown_group_is_one_line_on_the_columns_path(tmp_path, monkeypatch):
    """A collective naming a process group no rank declares: batch_compile's probes decline it
    on the columns path as on the object path, and the reference names it (no traceback)."""
    from genie.cli import main
    from genie.errors import GenieError

    wl = llm(16, tp=2, pp=2, layers=4)
    from genie.workload.model import NodeType

    coll = next(n for n in wl.ranks[5].nodes if n.type == NodeType.COMM_COLL_NODE)
    coll.set_attr("pg_name", "string_val", "nosuch")
    save_workload(wl, tmp_path / "w")
    monkeypatch.setattr(adapter, "COLUMNS_BYTES", 0)
    cw = adapter.load_workload(tmp_path / "w", columns=True)
    assert columns(cw, TRACE, "inferred") is None  # declined, not raised
    with pytest.raises(GenieError, match="nosuch"):
        compile_workload(cw)
    assert main(["simulate", str(tmp_path / "w"), "--json"]) == 2
