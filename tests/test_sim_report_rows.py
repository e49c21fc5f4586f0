"""Report rows made as arrays (genie.sim.report, genie.sim.closed, --json output) against the
one-row-at-a-time references they replaced: the same rows, dicts, closed forms and bytes."""

from __future__ import annotations

import io
import math
import sys
from dataclasses import fields

import numpy as np
import pytest

from genie.collectives import topology as T
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.closed import ClosedForm, closed_for, with_closed
from genie.sim.network import AnalyticalBackend
from genie.sim.program_pricer import ProgramPricer
from genie.sim.report import (
    CollectiveRow,
    RankBreakdown,
    _row_dict,
    collective_rows,
    collective_rows_reference,
)
from genie.sim.streams import order_collectives
from genie.workload.generators import llm, moe


def _backend(n: int) -> AnalyticalBackend:
    topo = T.switch(n, 50 * 2**30, 500e-9)
    return AnalyticalBackend(ProgramPricer(topo, list(range(n)), n), track_links=True)


def _typed(rows: list[CollectiveRow]) -> list[list[tuple[type, object]]]:
    """Each row's values with their types (1 == np.int64(1), but JSON tells them apart)."""
    return [[(type(v), v) for v in vars(r).values()] for r in rows]


@pytest.mark.parametrize("symmetry", [True, False])
@pytest.mark.parametrize("kind", ["llm", "moe"])
def test_rows_as_arrays_are_the_reference_rows(kind, symmetry):
    wl = (
        llm(16, tp=2, pp=2, layers=2, micro_batches=2)
        if kind == "llm"
        else moe(8, layers=2, expert_skew=0.5)
    )
    cw = order_collectives(compile_workload(wl), 1)
    be = _backend(cw.n_ranks)
    rep, raw = replay(cw, be, symmetry=symmetry)
    assert rep.symmetric == (symmetry and kind == "llm")  # moe's uneven all-to-alls: every rank
    if kind == "moe":
        assert cw.instances.splits and any(r.uneven is not None for r in rep.collectives)
    else:
        assert any(r.group.startswith("p2p ") for r in rep.collectives)
    for standalone in (be.standalone, None):
        for sym in (True, False):
            fast = collective_rows(cw, raw, standalone, sym)
            ref = collective_rows_reference(cw, raw, standalone, sym)
            assert len(fast) == len(ref) == len(cw.instances)
            assert _typed(fast) == _typed(ref)
    assert _typed(rep.collectives) == _typed(
        collective_rows_reference(cw, raw, be.standalone, rep.symmetric)
    )


def test_rows_skip_instances_that_never_ran():
    cw = order_collectives(compile_workload(llm(8, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    _, raw = replay(cw, _backend(8), symmetry=False)
    raw.inst_start[::3] = math.nan
    fast, ref = (
        collective_rows(cw, raw, None, False),
        collective_rows_reference(cw, raw, None, False),
    )
    assert 0 < len(fast) < len(cw.instances) and _typed(fast) == _typed(ref)
    raw.inst_start[:] = math.nan
    assert collective_rows(cw, raw, None, False) == []


def test_report_dicts_are_the_rows_fields_in_order():
    cw = order_collectives(compile_workload(llm(8, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    rep, _ = replay(cw, _backend(8))
    rep.collectives[0].extra = "not a field"  # type: ignore[attr-defined]
    del rep.ranks[1].compute  # set again below: its key moves to the end of __dict__
    rep.ranks[1].compute = 1.5
    d = rep.to_dict()
    for cls, rows, dicts in (
        (CollectiveRow, rep.collectives, d["collectives"]),
        (RankBreakdown, rep.ranks, d["ranks"]),
    ):
        names = [f.name for f in fields(cls)]
        assert len(dicts) == len(rows) > 1
        for row, got in zip(rows, dicts, strict=True):
            assert list(got) == names and got == _row_dict(cls, row)
            assert got is not vars(row)  # a copy: with_closed adds to it
    assert d["ranks"][1]["compute"] == 1.5


def _row(coll: str, n: int, size: int, uneven: float | None = None) -> dict[str, object]:
    return {"collective": coll, "ranks": n, "size": size, "uneven": uneven}


@pytest.mark.parametrize(
    "closed",
    [
        None,
        ClosedForm(50e9, 1e-6, None),
        ClosedForm(50e9, 1e-6, {"all_reduce": "ring"}),
        ClosedForm(50e9, 1e-6, {}, chunks=2),
    ],
)
def test_closed_forms_priced_once_per_kind_of_row_are_each_rows(closed):
    rows = [
        _row("all_reduce", 8, 1 << 20),
        _row("all_reduce", 8, 1 << 20),
        _row("all_reduce", 8, 1 << 21),
        _row("all_gather", 4, 1 << 20),
        _row("all_to_all", 8, 1 << 20),
        _row("all_to_all", 8, 1 << 20, 2.5),  # uneven: no closed form
        _row("all_to_all", 8, 1 << 20),
        _row("send_recv", 2, 1 << 20),
        _row("barrier", 8, 0),
        _row("all_reduce", 8.0, 1 << 20),  # type: ignore[arg-type]  # not an int: none
    ]
    want = [closed_for(r, closed) for r in rows]
    got = with_closed({"collectives": [dict(r) for r in rows]}, closed)["collectives"]
    assert [r["closed_form_s"] for r in got] == want  # type: ignore[index]
    if closed is not None and closed.chunks == 1:
        assert want[0] is not None and want[5] is None and want[4] is not None
        assert want[9] is None


def _dumped(stream: io.TextIOBase, doc: object) -> str:
    from genie.commands._sim_output import dump_json

    old = sys.stdout
    sys.stdout = stream  # type: ignore[assignment]
    try:
        stream.write("before\n")
        dump_json(doc)
        stream.write("after\n")
    finally:
        sys.stdout = old
    stream.flush()
    raw = stream.buffer.getvalue() if hasattr(stream, "buffer") else stream.getvalue().encode()  # type: ignore[attr-defined]
    return raw.decode()


def test_json_through_the_byte_stream_is_the_text_streams():
    doc = {"x": [1.5, math.nan, math.inf, np.float64(2.0)], "name": "ränk ✓", "n": np.int64(3)}
    text = _dumped(io.StringIO(), doc)  # no byte buffer: written as text
    binary = _dumped(io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), doc)
    assert binary == text
    assert text.startswith("before\n{") and text.endswith("}\nafter\n") and "null" in text
    assert "ränk ✓" in text


def test_trace_facts_count_host_work_as_the_nodes_say():
    from genie.api.simulation import trace_facts
    from genie.workload.model import Attr, NodeKind, NodeType

    wl = llm(8, tp=2, pp=2, layers=2, micro_batches=2)
    changed = 0
    for r, rg in enumerate(wl.ranks):
        for n in rg.nodes:
            if n.type == NodeType.COMM_COLL_NODE and (n.id + r) % 3 == 0:
                # a launcher on the host: is_cpu_op and no comm_type (genie.workload.model)
                n.attrs = [a for a in n.attrs if a.name != "comm_type"]
                n.attrs.append(Attr("is_cpu_op", "bool_val", True))
                n.refresh()
                changed += 1
            elif n.type == NodeType.COMM_COLL_NODE and (n.id + r) % 3 == 1:
                # is_cpu_op with its comm_type: a collective still, not host work
                n.attrs.append(Attr("is_cpu_op", "bool_val", True))
                n.refresh()
    assert changed
    cw = compile_workload(wl)
    facts = trace_facts(wl, cw)
    brute = sum(n.kind is NodeKind.HOST for rg in wl.ranks for n in rg.nodes)
    assert facts["host_work_nodes"] == brute == changed
    assert cw.host_work_nodes == brute  # counted by the batch compile, per distinct node
    cw.host_work_nodes = None  # not counted: the nodes asked
    assert trace_facts(wl, cw) == facts
    assert "cpu" in facts["lanes"]


@pytest.mark.parametrize("kind", ["pytorch", "llm"])
def test_trace_facts_of_a_columnar_workload_are_the_object_workloads(tmp_path, kind):
    from genie.api.simulation import trace_facts
    from genie.workload import load_workload, save_workload
    from genie.workload.columnar import load_columns
    from genie.workload.generators.pytorch_style import pytorch_style

    if kind == "pytorch":  # launchers of collectives on the host: host work
        wl = pytorch_style(4, layers=4, steps=2, bucket_layers=2)
    else:
        wl = llm(8, tp=2, pp=2, layers=2, micro_batches=2)
    save_workload(wl, tmp_path / "w")
    cols = load_columns(tmp_path / "w")
    assert all(hasattr(c, "derived_table") for c in cols.ranks)  # the columns' path is taken
    objs = load_workload(tmp_path / "w")
    cw = compile_workload(objs)
    counted = cw.host_work_nodes  # the batch compile's count
    cw.host_work_nodes = None  # each workload's own count, not the compile's
    got, want = trace_facts(cols, cw), trace_facts(objs, cw)  # type: ignore[arg-type]
    assert got == want
    assert (want["host_work_nodes"] > 0) == (kind == "pytorch")
    assert counted == want["host_work_nodes"]
