"""PyTorch-derived Chakra traces: host work, GPU collectives, process groups, lanes, drops, JSON.

The trace is built from Chakra's converter conventions (``genie.workload.generators.
pytorch_style``): c10d launchers on the CPU without comm_type, ncclDevKernel nodes with comm
attrs on streams 20 and 24, compute kernels on stream 7, a process_group:init METADATA node,
ctrl_deps to the dropped thread root, kernels whose ids follow every CPU op.

What genie reads and simulates is checked through the library (``load_workload``,
``summarize``, ``genie.simulate``); one test checks what ``genie workload inspect`` prints.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

import genie
from genie.cli import main
from genie.errors import GenieError, WorkloadError
from genie.sim.adapter import compile_workload
from genie.sim.engine import simulate
from genie.sim.network import FixedTimeBackend
from genie.workload import et_fast, et_schema, load_workload, save_workload, summarize
from genie.workload.chakra_json import decode_chakra_json
from genie.workload.conversion import convert
from genie.workload.et_codec import read_trace, split_frames
from genie.workload.generators.pytorch_style import DP_STREAM, TP_STREAM, pytorch_style
from genie.workload.model import Attr, IOInfo, Node, NodeKind, NodeType

LAYERS, STEPS, BUCKET = 4, 2, 2
HOST_PER_STEP = LAYERS // BUCKET + 1  # one c10d launcher per bucket, one all-gather
CPU_OPS_PER_STEP = 2 * LAYERS + 2 * HOST_PER_STEP + 3  # + marker, optimizer, sync
CPU_NODES = 1 + STEPS * CPU_OPS_PER_STEP  # + process_group:init


def write(tmp: Path, messy: bool = False, side_file: bool = False) -> Path:
    """The trace as .et files; ``messy`` adds a self and a forward ctrl_dep, a self data_dep."""
    wl = pytorch_style(4, layers=LAYERS, steps=STEPS, bucket_layers=BUCKET)
    if messy:
        for rg in wl.ranks:
            a, b, c = rg.nodes[3], rg.nodes[4], rg.nodes[5]
            a.raw_ctrl_deps = a.ctrl_deps = [a.id]
            b.raw_ctrl_deps = b.ctrl_deps = [c.id]
            c.data_deps = [*c.data_deps, c.id]
    prefix = tmp / "pt"
    save_workload(wl, prefix)
    if not side_file:
        (tmp / "pt.comm_group.json").unlink()
    return prefix


def jsonize(et: Path, out: Path) -> None:
    """What chakra_jsonizer writes: protobuf's JSON of each message, one after another."""
    data = et.read_bytes()
    frames = split_frames(data, str(et))
    parts = []
    for k, (_, s, e) in enumerate(frames):
        msg = et_schema.GlobalMetadata() if k == 0 else et_schema.Node()
        msg.ParseFromString(data[s:e])
        parts.append(json_format.MessageToJson(msg))
    out.write_text("".join(parts))


def to_json_set(prefix: Path, gz: bool = False) -> Path:
    out = prefix.with_name("pj")
    for r in range(4):
        dst = out.with_name(f"pj.{r}.json")
        jsonize(prefix.with_name(f"pt.{r}.et"), dst)
        if gz:
            dst.with_name(dst.name + ".gz").write_bytes(gzip.compress(dst.read_bytes()))
            dst.unlink()
    return out


class PerSize(FixedTimeBackend):
    """Each collective takes comm_size / 1e9 s (1 GB/s): a network whose numbers are known."""

    def __init__(self) -> None:
        super().__init__("per-size")

    def duration(self, transfer) -> float:
        return transfer.size / 1e9


def inspect(prefix: Path) -> dict:
    """What ``genie workload inspect --json`` prints: the workload's summary."""
    return summarize(load_workload(prefix))


def refused(prefix: Path) -> str:
    """Reading (and summarizing) ``prefix`` is refused: the one-line message."""
    with pytest.raises(GenieError) as exc:
        inspect(prefix)
    msg = str(exc.value)
    assert "\n" not in msg, msg
    return msg


def simulated(prefix: Path) -> genie.Simulation:
    """``genie simulate PREFIX`` through the API."""
    return genie.simulate(genie.SimulateSpec(workload=str(prefix)))


# ---------------------------------------------------------------------------- inspect


def test_inspect_reads_host_work_groups_and_drops(tmp_path, capsys):
    prefix = write(tmp_path, messy=True)
    s = inspect(prefix)
    assert s["nodes_by_kind"]["host"] == 4 * STEPS * HOST_PER_STEP
    assert s["nodes_by_kind"]["collective"] == 4 * STEPS * HOST_PER_STEP
    # process groups from the process_group:init node (no side file here)
    assert s["groups"]["0"] == [0, 1, 2, 3]
    assert s["groups"]["1"] == [0, 2] and s["groups"]["2"] == [1, 3]
    # the METADATA node and each step's marker name the missing thread root; the messy edits
    # add a self and a forward ctrl_dep
    missing = 1 + STEPS
    assert s["dropped"] == {
        "ctrl_deps_to_self": 4,
        "ctrl_deps_to_missing_ids": 4 * missing,
        "ctrl_deps_forward": 4,
        "data_deps_to_self": 4,
    }
    types = {(c["type"], c["pg_name"]) for c in s["collectives"]}
    assert types == {("ALL_REDUCE", "0"), ("ALL_GATHER", "1"), ("ALL_GATHER", "2")}
    assert main(["workload", "inspect", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert "host-side communication launchers" in out and "ctrl_deps forward" in out


# ---------------------------------------------------------------------------- simulate


def test_simulate_json_reports_drops_host_work_and_lanes(tmp_path):
    prefix = write(tmp_path, messy=True)
    sim = simulated(prefix)
    assert sim.facts["dropped"] == inspect(prefix)["dropped"]
    assert sim.facts["host_work_nodes"] == 4 * STEPS * HOST_PER_STEP
    assert sim.facts["lanes"] == ["cpu", "stream 20", "stream 24", "stream 7"]
    assert sim.to_dict()["trace"] == sim.facts  # what --json prints as "trace"
    (rep,) = sim.reports
    # only the GPU kernels are network collectives: per step the buckets and one all-gather
    # per parity group; groups are labelled with PyTorch's pg_desc
    names = sorted((c.collective, c.group) for c in rep.collectives)
    assert names.count(("all_reduce", "0 (default_pg)")) == STEPS * (LAYERS // BUCKET)
    assert names.count(("all_gather", "1 (even)")) == STEPS
    assert names.count(("all_gather", "2 (odd)")) == STEPS
    assert all(c.ranks == 2 for c in rep.collectives if c.collective == "all_gather")
    assert any("host-side communication launchers" in n for n in rep.notes)


def lanes_of(cw, raw, rank):
    """lane name -> [(start, end, node index)] of rank ``rank``."""
    cr = cw.ranks[rank]
    sl = raw.rank_slice(raw.sim_ranks.index(rank))
    st, en = raw.start[sl], raw.end[sl]
    out: dict[str, list] = {}
    for i in range(cr.n_nodes):
        if cr.lane[i] >= 0:
            out.setdefault(cr.lane_names[cr.lane[i]], []).append((st[i], en[i], i))
    return out


def overlaps(a, b) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1, _ in a for s2, e2, _ in b)


def test_lanes_on_the_real_style_trace(tmp_path):
    wl = load_workload(write(tmp_path))
    cw = compile_workload(wl)
    raw = simulate(cw, PerSize())
    cr = cw.ranks[0]
    by_lane = lanes_of(cw, raw, 0)
    assert set(by_lane) == {"cpu", "stream 7", f"stream {DP_STREAM}", f"stream {TP_STREAM}"}
    for name, spans in by_lane.items():  # each lane runs one node at a time
        spans = sorted(spans)
        assert all(e1 <= s2 + 1e-15 for (_, e1, _), (s2, _, _) in itertools.pairwise(spans)), name
    # the host runs ahead of the GPU, compute overlaps communication, the two nccl streams overlap
    assert overlaps(by_lane["cpu"], by_lane["stream 7"])
    assert overlaps(by_lane["stream 7"], by_lane[f"stream {DP_STREAM}"])
    assert overlaps(by_lane[f"stream {DP_STREAM}"], by_lane[f"stream {TP_STREAM}"])
    # a host launcher is CPU work of its trace duration, never a network operation
    nodes = wl.ranks[0].nodes
    c10d = [i for i, n in enumerate(nodes) if n.kind is NodeKind.HOST]
    assert len(c10d) == STEPS * HOST_PER_STEP
    for i in c10d:
        assert cr.instance[i] == -1 and cr.lane_names[cr.lane[i]] == "cpu"
        assert raw.end[i] - raw.start[i] == pytest.approx(nodes[i].duration_micros * 1e-6)
    # a GPU all-reduce is priced by the network (1 GB/s here), not replayed from its duration
    ar = next(i for i, n in enumerate(nodes) if n.name.startswith("ncclDevKernel_AllReduce"))
    assert raw.end[ar] - raw.start[ar] == pytest.approx(nodes[ar].comm_size / 1e9)
    # the sync op waits for the GPU through its forward data_deps
    sync = next(i for i, n in enumerate(nodes) if n.name == "aten::_local_scalar_dense")
    deps = [nodes.index(wl.ranks[0].by_id[d]) for d in nodes[sync].data_deps]
    assert raw.start[sync] >= max(raw.end[d] for d in deps) and max(deps) > sync


def test_lanes_change_the_iteration_time_as_a_by_hand_bound_says(tmp_path):
    wl = load_workload(write(tmp_path))
    raw = simulate(compile_workload(wl), PerSize())
    nodes = wl.ranks[0].nodes
    # stream 7 alone is busy for every compute kernel, one after another
    gpu = sum(n.duration_micros for n in nodes if n.stream == 7) * 1e-6
    dp = sum(n.comm_size for n in nodes if n.stream == DP_STREAM) / 1e9
    assert raw.makespan >= gpu and raw.makespan >= dp
    cpu = sum(n.duration_micros for n in nodes if n.is_cpu_op) * 1e-6
    assert raw.makespan < cpu + gpu + dp  # lanes overlap: less than everything in sequence


# ---------------------------------------------------------------------------- process groups


def test_comm_group_file_overrides_metadata_and_pg_zero_is_the_world(tmp_path):
    prefix = write(tmp_path)
    (tmp_path / "g.json").write_text(json.dumps({"1": [2, 0], "2": [3, 1]}))
    wl = load_workload(prefix, comm_groups=tmp_path / "g.json")
    assert wl.groups["1"] == (2, 0) and wl.groups["0"] == (0, 1, 2, 3)
    # without the process_group:init node, pg "0" still means every rank (ASTRA-sim's rule) but
    # "1" has no members: a clear error when simulating
    for r in range(4):
        et = tmp_path / f"pt.{r}.et"
        meta, nodes, _ = read_trace(et)
        nodes[0].inputs = IOInfo()
        from genie.workload.et_codec import write_trace

        write_trace(et, meta, nodes)
    wl = load_workload(prefix)
    assert wl.groups["0"] == (0, 1, 2, 3) and "1" not in wl.groups
    with pytest.raises(GenieError, match="process group '1'") as exc:
        simulated(prefix)
    assert "\n" not in str(exc.value)
    wl = load_workload(prefix, comm_groups=tmp_path / "g.json")
    assert wl.groups["2"] == (3, 1)


@pytest.mark.parametrize(
    "values, msg",
    [
        ('[\'[{"pg_name": "1"\'', "not a JSON list of groups"),
        ("['[1, 2]']", "not a list of groups"),
        ('[{"pg_name": "1", "ranks": ["a"]}]', "non-integer ranks"),
        ('[{"ranks": [0]}]', "lacks pg_name"),
    ],
)
def test_bad_process_group_records_are_one_line_errors(tmp_path, values, msg):
    prefix = write(tmp_path)
    meta, nodes, _ = read_trace(tmp_path / "pt.1.et")
    nodes[0].inputs = IOInfo(values, "", "")
    from genie.workload.et_codec import write_trace

    write_trace(tmp_path / "pt.1.et", meta, nodes)
    with pytest.raises(WorkloadError) as e:
        load_workload(prefix)
    assert msg in str(e.value) and "rank 1" in str(e.value) and "\n" not in str(e.value)


def test_ranks_that_disagree_on_a_group_are_an_error(tmp_path):
    prefix = write(tmp_path)
    meta, nodes, _ = read_trace(tmp_path / "pt.3.et")
    nodes[0].inputs = IOInfo(str([json.dumps([{"pg_name": "1", "ranks": [0, 1]}])]), "", "")
    from genie.workload.et_codec import write_trace

    write_trace(tmp_path / "pt.3.et", meta, nodes)
    with pytest.raises(WorkloadError, match=r"process group '1' is \[0, 1\] here but \[0, 2\]"):
        load_workload(prefix)


# ---------------------------------------------------------------------------- what is refused


def _one_rank_set(tmp: Path, node: Node) -> Path:
    from genie.workload.et_codec import write_trace
    from genie.workload.model import Metadata

    for r in range(2):
        write_trace(tmp / f"x.{r}.et", Metadata(), [node])
    return tmp / "x"


def test_a_gpu_collective_without_comm_type_is_still_refused(tmp_path):
    n = Node(5, "ncclDevKernel_X", NodeType.COMM_COLL_NODE, attrs=[Attr("stream", "int64_val", 20)])
    err = refused(_one_rank_set(tmp_path, n))
    assert "without comm_type" in err and "is_cpu_op = true" in err


def test_a_gpu_send_without_peer_is_refused_a_host_send_is_cpu_work(tmp_path):
    size = Attr("comm_size", "int64_val", 64)
    gpu = Node(5, "ncclDevKernel_SendRecv", NodeType.COMM_SEND_NODE, attrs=[size])
    assert "send without comm_dst" in refused(_one_rank_set(tmp_path, gpu))
    cpu = Attr("is_cpu_op", "bool_val", True)
    host = Node(5, "c10d::send", NodeType.COMM_SEND_NODE, duration_micros=7, attrs=[cpu, size])
    rep = simulated(_one_rank_set(tmp_path, host)).reports[0]
    assert rep.collectives == []
    assert rep.iteration_s == pytest.approx(7e-6)


def test_old_converters_int32_is_cpu_op_counts_as_true(tmp_path):
    n = Node(
        5,
        "c10d::broadcast_",
        NodeType.COMM_COLL_NODE,
        duration_micros=3,
        attrs=[Attr("is_cpu_op", "int32_val", 1)],
    )
    wl = load_workload(_one_rank_set(tmp_path, n))
    assert wl.ranks[0].nodes[0].kind is NodeKind.HOST


# ---------------------------------------------------------------------------- Chakra JSON


def _without_wall(doc: dict) -> dict:
    for rep in doc["reports"]:
        rep.pop("wall_s")
    return doc


def test_chakra_json_of_the_same_trace_gives_identical_results(tmp_path):
    prefix = write(tmp_path, messy=True)
    jprefix = to_json_set(prefix)
    a, b = inspect(prefix), inspect(jprefix)
    a.pop("name"), b.pop("name")
    for s in (a, b):
        s["problems"] = [p.replace("pt.", "X.").replace("pj.", "X.") for p in s["problems"]]
        s["problems"] = [p.replace(".et", "").replace(".json", "") for p in s["problems"]]
    assert a == b
    sa = _without_wall(simulated(prefix).to_dict())
    sb = _without_wall(simulated(jprefix).to_dict())
    sa.pop("workload"), sb.pop("workload")
    for d in (sa, sb):
        d["reports"][0].pop("workload")
    assert sa == sb
    # the node objects are the .et's nodes, attr kinds included (a re-write is byte-identical)
    _, et_nodes, _ = read_trace(prefix.with_name("pt.2.et"))
    _, js_nodes, problems = decode_chakra_json(jprefix.with_name("pj.2.json").read_bytes())
    assert problems == [] and js_nodes == et_nodes


def test_convert_turns_chakra_json_back_into_the_same_et_bytes(tmp_path):
    prefix = write(tmp_path, messy=True)
    jprefix = to_json_set(prefix)
    out = tmp_path / "back" / "pt"
    convert(jprefix.with_name("pj.1.json"), out)
    for r in range(4):
        assert (
            out.with_name(f"pt.{r}.et").read_bytes() == prefix.with_name(f"pt.{r}.et").read_bytes()
        )


def test_gzip_json_rank_files_load_by_the_same_prefix_rules(tmp_path, capsys):
    prefix = write(tmp_path)
    jprefix = to_json_set(prefix, gz=True)
    assert sorted(p.name for p in tmp_path.glob("pj.*")) == [f"pj.{r}.json.gz" for r in range(4)]
    wl = load_workload(jprefix)
    assert wl.n_ranks == 4 and wl.groups["1"] == (0, 2)
    assert load_workload(tmp_path / "pj.3.json.gz").n_ranks == 4  # one rank file names the set


def test_json_reader_agrees_with_protobufs_json_parser(tmp_path):
    prefix = write(tmp_path, messy=True)
    jprefix = to_json_set(prefix)
    text = jprefix.with_name("pj.0.json").read_text()
    _, nodes, _ = decode_chakra_json(text.encode())
    objs = json.loads("[" + text.replace("\n}{", "\n},{") + "]")
    for obj, n in zip(objs[1:], nodes, strict=True):
        ref = et_fast.node_from_pb(json_format.ParseDict(obj, et_schema.Node()))
        assert ref == n
    # snake_case field names, numbers for enums and compact concatenation are read alike
    msgs = [et_schema.GlobalMetadata()] + [et_schema.Node() for _ in nodes]
    compact = "".join(
        json.dumps(
            json_format.MessageToDict(
                json_format.ParseDict(o, m),
                preserving_proto_field_name=True,
                use_integers_for_enums=True,
            )
        )
        for o, m in zip(objs, msgs, strict=True)
    )
    _, again, _ = decode_chakra_json(compact.encode())
    assert again == nodes


@pytest.mark.parametrize(
    "text, msg",
    [
        ("", "empty JSON trace"),
        ('{"version": "0.0.4"}{"id": "1", "type": "NOPE"}', "unknown node type 'NOPE'"),
        ('{"version": "0.0.4"}{"id": "x"}', "id 'x' is not an integer"),
        (
            '{"version": "0.0.4"}{"attr": [{"name": "a", "int64Val": "1", "boolVal": true}]}',
            "two values",
        ),
        ('{"version": "0.0.4"}{"id": "1", "bogus": 1}', "unknown node field"),
        ('{"version": "0.0.4"}{"id": "1"', "not Chakra JSON"),
        ('{"format": "genie-chakra-json"}', "genie's own JSON form"),
        ('{"version": "0.0.4"}{"id": "-1"}', "out of range"),
    ],
)
def test_bad_chakra_json_is_a_one_line_error(tmp_path, text, msg):
    for r in range(2):
        (tmp_path / f"b.{r}.json").write_text(text)
    err = refused(tmp_path / "b")
    assert msg in err and "b.0.json" in err


def test_real_style_trace_decodes_without_protobufs_parser(tmp_path, monkeypatch):
    prefix = write(tmp_path)
    et = prefix.with_name("pt.0.et")

    def refuse(_m):
        raise AssertionError("the fast path handed a canonical node to protobuf")

    monkeypatch.setattr(et_fast, "node_from_pb", refuse)
    _, nodes, problems = read_trace(et)
    assert problems == [] and all(n.inputs is not None for n in nodes)
