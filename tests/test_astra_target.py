"""``genie workload generate`` writes files ASTRA-sim 2.0 runs: each rule of its Workload.cc,
checked by decoding the files with protobuf alone (no genie reader), for every generator.

The rules (ASTRA-sim 518bd51 ``astra-sim/workload/Workload.cc``, ``CommunicatorGroup.cc``,
Chakra feeder_v3 ``et_feeder.cpp``): pg_name and comm-group keys parse as integers (``std::stoi``)
and named groups are keys above 0 of the comm-group JSON; only ALL_REDUCE, ALL_GATHER,
REDUCE_SCATTER and ALL_TO_ALL run (REDUCE aborts, BROADCAST moves nothing); no COMM node has
``is_cpu_op`` true; sends carry comm_dst and comm_tag (comm_src, if any, is the rank), receives
comm_src and comm_tag; every data_dep and ctrl_dep names a node of the file; some node has no
dependency; no rank runs one collective type in two groups smaller than the world (a double free).
When ASTRA-sim's analytical binary is on this machine, the files also run there to completion.

The files come from the library (``genie.generate(spec, "astra-sim")``, ``genie.save_workload``),
which ``genie workload generate`` calls; one test runs the command itself: its refusals and
what it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from google.protobuf.internal.decoder import _DecodeVarint32

import genie
from genie.cli import main
from genie.workload import et_schema, load_workload, save_workload, summarize

RUNNABLE = {0, 2, 6, 7}  # ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER
COLL, SEND, RECV = 7, 5, 6
KINDS = {
    "microbench": genie.Microbench(ranks=8, sizes=(64 << 10, 256 << 10, 1 << 20)),
    "dp": genie.DataParallel(ranks=8, layers=4, hidden=512),
    "llm": genie.Transformer(ranks=8, tp=2, pp=2, layers=4, hidden=512, seq=256),
    "llm-zero": genie.Transformer(ranks=8, tp=2, pp=2, layers=4, hidden=512, zero=True),
    "moe": genie.MixtureOfExperts(ranks=8, layers=2, hidden=512, seq=256),
}


def frames(data: bytes):
    """Length-delimited messages: (offset, body) pairs, split by protobuf's own varint decoder."""
    pos = 0
    while pos < len(data):
        ln, body = _DecodeVarint32(data, pos)
        yield pos, data[body : body + ln]
        pos = body + ln


def attrs(node) -> dict:
    out = {}
    for a in node.attr:
        out[a.name] = (a.WhichOneof("value"), getattr(a, a.WhichOneof("value") or "name"))
    return out


def astra_violations(prefix: Path, n: int) -> list[str]:
    """Every ASTRA-sim rule the rank files ``prefix.<r>.et`` break (empty: it runs them)."""
    bad: list[str] = []
    side = prefix.with_name(prefix.name + ".comm_group.json")
    groups: dict[str, list[int]] = {}
    if side.exists():
        for k, v in json.loads(side.read_text()).items():
            if not k.isdigit() or int(k) <= 0:
                bad.append(f"comm-group key {k!r} is not an integer above 0")
            if not all(type(x) is int and 0 <= x < n for x in v):
                bad.append(f"comm-group {k} has ranks outside 0..{n - 1}: {v}")
            groups[k] = v
    for r in range(n):
        f = prefix.with_name(f"{prefix.name}.{r}.et")
        if not f.exists():
            bad.append(f"{f.name} missing")
            continue
        msgs = list(frames(f.read_bytes()))
        if not msgs or not msgs[0][1]:
            bad.append(f"{f.name}: no (or an empty) GlobalMetadata frame")
            continue
        nodes = []
        for _, body in msgs[1:]:
            m = et_schema.Node()
            m.ParseFromString(body)
            nodes.append(m)
        ids = [m.id for m in nodes]
        if len(set(ids)) != len(ids):
            bad.append(f"{f.name}: duplicate node ids")
        idset = set(ids)
        if not any(not m.data_deps and not m.ctrl_deps for m in nodes):
            bad.append(f"{f.name}: no dependency-free node")
        types_in: dict[int, set[str]] = {}
        for m in nodes:
            where = f"{f.name} node {m.id} {m.name!r}"
            for d in [*m.data_deps, *m.ctrl_deps]:
                if d not in idset or d == m.id:
                    bad.append(f"{where}: dependency {d} names no other node of the file")
            a = attrs(m)
            if m.type in (COLL, SEND, RECV):
                if a.get("is_cpu_op", ("bool_val", False))[1]:
                    bad.append(f"{where}: communication node with is_cpu_op true")
                if "comm_size" not in a or not a["comm_size"][0].endswith("int64_val"):
                    bad.append(f"{where}: no integer comm_size")
            if m.type == COLL:
                if "comm_type" not in a or a["comm_type"][1] not in RUNNABLE:
                    bad.append(f"{where}: comm_type {a.get('comm_type')} ASTRA-sim does not run")
                pg = a.get("pg_name", ("string_val", ""))[1]
                if pg not in ("", "0"):
                    if not pg.isdigit():
                        bad.append(f"{where}: pg_name {pg!r} is not an integer (std::stoi)")
                    if pg not in groups:
                        bad.append(f"{where}: pg_name {pg} is not in the comm-group file")
                    elif len(groups[pg]) < n:
                        types_in.setdefault(a["comm_type"][1], set()).add(pg)
                if "involved_dim" in a and a["involved_dim"][0] != "bool_list":
                    bad.append(f"{where}: involved_dim is not a bool list")
            elif m.type == SEND:
                if "comm_dst" not in a or "comm_tag" not in a:
                    bad.append(f"{where}: send without comm_dst/comm_tag")
                if "comm_src" in a and a["comm_src"][1] != r:
                    bad.append(f"{where}: send's comm_src is not the rank")
            elif m.type == RECV:
                if "comm_src" not in a or "comm_tag" not in a:
                    bad.append(f"{where}: recv without comm_src/comm_tag")
                if "comm_dst" in a and a["comm_dst"][1] != r:
                    bad.append(f"{where}: recv's comm_dst is not the rank")
        for t, gs in types_in.items():
            if len(gs) > 1:
                bad.append(f"{f.name}: comm_type {t} in sub-world groups {sorted(gs)}: double free")
    return bad


def generate(
    tmp: Path, kind: str, target: str = "astra-sim", ranks: int = 8, name: str = ""
) -> Path:
    """Generate ``kind`` for ``target`` and write it as ``tmp/NAME.<rank>.et``: the prefix."""
    out = tmp / (name or kind)
    gen = genie.generate(KINDS[kind].replace(ranks=ranks), target)
    save_workload(gen.workload, out)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generated_workloads_keep_every_astra_sim_rule(tmp_path, kind):
    prefix = generate(tmp_path, kind)
    assert astra_violations(prefix, 8) == []
    s = summarize(load_workload(prefix))
    assert s["astra_sim"] == [] and s["problems"] == []


def test_the_checker_catches_what_genie_form_breaks(tmp_path):
    llm = generate(tmp_path, "llm", "genie")
    bad = astra_violations(llm, 8)
    assert any("is not an integer (std::stoi)" in b for b in bad)
    assert any("double free" in b for b in bad)  # TP and DP all-reduce on one rank
    mb = generate(tmp_path, "microbench", "genie", ranks=4)
    assert any("does not run" in b for b in astra_violations(mb, 4))


def test_readable_group_names_survive_as_descriptions(tmp_path):
    prefix = generate(tmp_path, "llm")
    sim = genie.simulate(genie.SimulateSpec(workload=str(prefix)))
    groups = {c.group for c in sim.reports[0].collectives}
    assert "1 (tp_d0_p0)" in groups and any("(dp_p0_t0)" in g for g in groups)


def test_astra_sim_target_refuses_what_it_cannot_run(tmp_path, capsys):
    args = ["workload", "generate", "microbench", "--ranks", "4", "--out", str(tmp_path / "x")]
    assert main([*args, "--types", "all_reduce,reduce"]) == 2
    err = capsys.readouterr().err
    assert "reduce (ASTRA-sim aborts" in err and "--for genie" in err and err.count("\n") == 1
    assert main([*args, "--types", "broadcast"]) == 2
    assert "moves no data" in capsys.readouterr().err
    assert main(args) == 0
    out = capsys.readouterr()
    assert "leaves out broadcast, reduce" in out.err
    # the command says how to run the files in ASTRA-sim, and they keep its rules
    assert f"--workload-configuration={tmp_path / 'x'}" in out.out
    assert astra_violations(tmp_path / "x", 4) == []


def test_llm_dp_sync_split_is_the_same_time_as_all_reduce_in_genie(tmp_path):
    """The astra-sim form's RS + AG prices as the all-reduce it stands for (ring)."""
    a = generate(tmp_path, "llm")
    b = generate(tmp_path, "llm", "genie", name="g")
    times = []
    for p in (a, b):
        spec = genie.SimulateSpec(
            workload=str(p), fabric=genie.Fabric(latency=0), model=genie.Model(algorithm="ring")
        )
        times.append(genie.simulate(spec).iteration_s)
    assert times[0] == pytest.approx(times[1], rel=1e-6)


ASTRA_BIN = Path(
    os.environ.get(
        "GENIE_ASTRA_BIN",
        "/work/astra/src/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware",
    )
)

SYSTEM = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 1,
    "all-reduce-implementation": ["ring"],
    "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"],
    "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
    "boost-mode": 0,
    "roofline-enabled": 0,
    "peak-perf": 900,
}


@pytest.mark.skipif(not ASTRA_BIN.is_file(), reason=f"ASTRA-sim binary not at {ASTRA_BIN}")
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generated_workloads_run_in_astra_sim(tmp_path, kind):
    prefix = generate(tmp_path, kind)
    (tmp_path / "sys.json").write_text(json.dumps(SYSTEM))
    (tmp_path / "net.yml").write_text(
        "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
    )
    (tmp_path / "mem.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    side = prefix.with_name(prefix.name + ".comm_group.json")
    r = subprocess.run(
        [
            str(ASTRA_BIN),
            f"--workload-configuration={prefix}",
            f"--comm-group-configuration={side if side.exists() else 'empty'}",
            f"--system-configuration={tmp_path / 'sys.json'}",
            f"--remote-memory-configuration={tmp_path / 'mem.json'}",
            f"--network-configuration={tmp_path / 'net.yml'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.count("finished,") == 8
