"""``genie simulate --json``'s cheaper paths against the ones they replaced: the document made
with each row's closed form in one pass (``Simulation.to_dict``) is ``with_closed`` over
``SimReport.to_dict``, key for key and byte for byte; the indented text made a chunk at a time
(``genie.commands._json_text``, ``dump_json``) is msgspec's format of the whole document."""

from __future__ import annotations

import io
import math
import sys

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import genie
from genie.api.simulation import Simulation, closed_forms
from genie.commands._json_text import _SLOT, indented
from genie.commands._sim_output import _plain, dump_json
from genie.sim.closed import ClosedForm, with_closed
from genie.sim.report import CollectiveRow, _row_dicts
from genie.workload import save_workload
from genie.workload.generators import llm, moe


def _whole(doc: object) -> bytes:
    """The text ``dump_json`` wrote before: msgspec's format of the whole document."""
    return msgspec.json.format(msgspec.json.encode(doc, enc_hook=_plain), indent=1)


def _pieces(doc: object, **kw: int) -> bytes:
    return b"".join(indented(doc, enc_hook=_plain, **kw))


def _reference_doc(sim: Simulation) -> dict[str, object]:
    """``Simulation.to_dict`` as it was: each report's dict, then ``with_closed`` over it."""
    doc = sim.to_dict()
    doc["reports"] = [with_closed(r.to_dict(), sim.closed) for r in sim.reports]
    return doc


ROWS = [
    {"a": i, "b": i / 7, "s": f'x,"{i}": [{{', "n": None, "l": [1, {"q": []}], "e": {}}
    for i in range(40)
]


@pytest.mark.parametrize(
    "doc",
    [
        ROWS,
        {"r": [{"x": ROWS, "y": ROWS[:3], "z": []}], "k": [], "m": {}},
        {"deep": [[[ROWS]]], "after": ROWS[::-1]},
        {"nums": [np.float64(1.5), np.int64(3), math.nan, -math.inf, 1e-300, 2**70]},
        [],
        {},
        "text",
        # strings that read as the slots standing for cut-out lists: the whole is formatted
        {"a": [_SLOT.format(0)], "b": ROWS},
        {"b": ROWS, "a": [_SLOT.format(0)], "c": ROWS},
    ],
)
@pytest.mark.parametrize(("long", "chunk"), [(1, 1), (2, 3), (5, 7), (1024, 2048)])
def test_pieces_are_the_whole_documents_format(doc, long, chunk):
    assert _pieces(doc, long=long, chunk=chunk) == _whole(doc)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
_docs = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=60,
)


@settings(max_examples=150, deadline=None)
@given(doc=_docs, long=st.integers(1, 4), chunk=st.integers(1, 5))
def test_any_document_reads_the_same(doc, long, chunk):
    assert _pieces(doc, long=long, chunk=chunk) == _whole(doc)


def _written(stream: io.TextIOBase, doc: object) -> bytes:
    old = sys.stdout
    sys.stdout = stream  # type: ignore[assignment]
    try:
        dump_json(doc)
    finally:
        sys.stdout = old
    stream.flush()
    if hasattr(stream, "buffer"):
        return stream.buffer.getvalue()  # type: ignore[attr-defined]
    return stream.getvalue().encode()  # type: ignore[attr-defined]


def test_dump_json_writes_the_whole_documents_format_on_both_streams():
    doc = {"rows": ROWS * 60, "name": "ränk ✓", "n": np.int64(3)}  # 2,400 rows: cut out
    want = _whole(doc) + b"\n"
    assert _written(io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), doc) == want
    assert _written(io.StringIO(), doc) == want


@pytest.fixture(scope="module")
def workloads(tmp_path_factory):
    root = tmp_path_factory.mktemp("wl")
    out = {}
    for name, wl in (
        ("llm", llm(16, tp=2, pp=2, layers=2, micro_batches=2)),
        ("moe", moe(8, layers=2, expert_skew=0.5)),  # uneven all-to-alls: no closed form
    ):
        save_workload(wl, root / name)
        out[name] = str(root / name)
    return out


@pytest.mark.parametrize("kind", ["llm", "moe"])
@pytest.mark.parametrize(
    "model",
    [
        genie.Model(),  # NCCL-like: the line-rate partner beside it
        genie.Model(collective_model="line-rate"),  # closed forms priced
        genie.Model(algorithm="ring"),
    ],
)
@pytest.mark.parametrize("symmetry", [True, False])
def test_document_is_the_reports_dicts_with_closed_forms(workloads, kind, model, symmetry):
    sim = genie.simulate(
        genie.SimulateSpec(workload=workloads[kind], model=model, symmetry=symmetry)
    )
    got, want = sim.to_dict(), _reference_doc(sim)
    assert msgspec.json.encode(got, enc_hook=_plain) == msgspec.json.encode(want, enc_hook=_plain)
    rows = got["reports"][0]["collectives"]  # type: ignore[index]
    assert rows and all(list(r)[-1] == "closed_form_s" for r in rows)
    if kind == "moe":
        assert any(r["uneven"] is not None and r["closed_form_s"] is None for r in rows)
    if sim.closed is not None:
        assert any(r["closed_form_s"] is not None for r in rows)


def _row(coll: str, n: object, size: object, uneven: float | None = None) -> CollectiveRow:
    return CollectiveRow(coll, "g", 0, n, size, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, uneven=uneven)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "closed",
    [None, ClosedForm(50e9, 1e-6, None), ClosedForm(50e9, 1e-6, {"all_reduce": "ring"})],
)
def test_closed_forms_are_with_closeds(closed):
    rows = [
        _row("all_reduce", 8, 1 << 20),
        _row("all_reduce", 8, 1 << 20),
        _row("all_reduce", 8.0, 1 << 20),  # not an int: none, though 8.0 == 8
        _row("all_reduce", 8, 1 << 21),
        _row("all_to_all", 8, 1 << 20, 2.5),
        _row("all_to_all", 8, 1 << 20),
        _row("send_recv", 2, 1 << 20),
        _row("all_gather", True, 1 << 20),  # a bool: its own memo entry, as with_closed's
        _row("all_reduce", np.int64(8), 1 << 20),  # numpy's int: not an int, none
        _row("all_reduce", 8, 1 << 20, 1.0),  # uneven after the even one of its shape
        _row("all_reduce", 8, 1 << 20),  # even again after those: its first value
    ]
    want = with_closed({"collectives": _row_dicts(CollectiveRow, rows)}, closed)["collectives"]
    got = _row_dicts(CollectiveRow, rows, ("closed_form_s", closed_forms(rows, closed)))
    assert got == want and [list(r) for r in got] == [list(r) for r in want]  # type: ignore[union-attr]
    if closed is not None:
        assert got[0]["closed_form_s"] is not None and got[2]["closed_form_s"] is None
        assert got[4]["closed_form_s"] is None and got[5]["closed_form_s"] is not None
        assert got[8]["closed_form_s"] is None and got[9]["closed_form_s"] is None
        assert got[10]["closed_form_s"] == got[0]["closed_form_s"]


def test_row_values_must_match_the_rows():
    rows = [_row("all_reduce", 8, 1 << 20)] * 3
    with pytest.raises(ValueError):
        _row_dicts(CollectiveRow, rows, ("closed_form_s", [None, None]))


@pytest.mark.parametrize(
    "values",
    [
        np.array([3, -1, 3, 7, 0, -1, 7, 7], np.int64),
        np.array([5], np.int64),
        np.array([], np.int64),
        np.array([0, 10**9, 5, 0], np.int64),  # a wide range: np.unique itself
        np.random.default_rng(1).integers(-5, 40, 2000),
    ],
)
def test_unique_by_counting_is_numpys(values):
    from genie.sim.report import _unique_small

    found, inverse = _unique_small(values)
    want, want_inverse = np.unique(values, return_inverse=True)
    assert found.dtype == want.dtype and found.tolist() == want.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()


@pytest.mark.parametrize("kind", ["llm", "moe"])
@pytest.mark.parametrize("symmetry", [True, False])
def test_exposure_reads_the_keys_of_the_replayed_instances_alike(kind, symmetry, monkeypatch):
    from genie.collectives import topology as T
    from genie.sim import report
    from genie.sim.adapter import compile_workload
    from genie.sim.api import replay
    from genie.sim.attribution import instance_keys
    from genie.sim.network import AnalyticalBackend
    from genie.sim.program_pricer import ProgramPricer
    from genie.sim.streams import order_collectives

    wl = llm(16, tp=2, pp=2, layers=2, micro_batches=2) if kind == "llm" else moe(8, layers=2)
    cw = order_collectives(compile_workload(wl), 1)
    n = cw.n_ranks
    be = AnalyticalBackend(ProgramPricer(T.switch(n, 50 * 2**30, 500e-9), list(range(n)), n))
    _, raw = replay(cw, be, symmetry=symmetry)
    cut = report._replayed_instance_keys(cw, raw)
    full = instance_keys(cw)
    assert cut and all(full[i] == k for i, k in cut.items())
    if symmetry and kind == "llm":
        assert len(raw.sim_ranks) < n and len(cut) < len(full)  # the cut is taken
    got = report._exposure(cw, raw)
    monkeypatch.setattr(report, "_replayed_instance_keys", lambda cw, raw: instance_keys(cw))
    want = report._exposure(cw, raw)
    assert got == want and [list(d) for d in got] == [list(d) for d in want]
    assert sum(got[0].values()) > 0


def test_a_frame_unlike_the_probe_formats_the_whole_or_stops(monkeypatch):
    from genie.commands import _json_text

    doc = {"rows": ROWS, "x": 1}
    monkeypatch.setattr(_json_text, "_framed", lambda depth: False)
    assert list(indented(doc, long=2)) == [_whole(doc)]  # told before the first piece
    monkeypatch.setattr(_json_text, "_framed", lambda depth: True)
    monkeypatch.setattr(_json_text, "_frame", lambda depth: (b"[[", b"]]"))
    with pytest.raises(_json_text.JsonTextError):
        list(indented(doc, long=2))
