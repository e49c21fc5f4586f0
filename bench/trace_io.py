"""Benchmark: loading a real-style trace: 100,000 nodes per rank x 8 ranks, as .et, .et.gz and
Chakra JSON (what chakra_jsonizer writes), then compiling and replaying it with lanes.

The trace has the shape of Chakra's PyTorch converter output
(``genie.workload.generators.pytorch_style``): CPU ops and host-side c10d launchers, GPU kernels
on three streams, a process_group:init node, IOInfo strings and the converter's attrs on every
node, ctrl_deps to the dropped thread root, forward data_deps from synchronisation ops. Per
format it prints the best of ``--repeat`` runs of ``load_workload`` (read every rank file,
resolve process groups, validate) in nodes/s by wall clock and by this process's CPU time;
then compile (``genie.sim.adapter``) and replay over the built-in traffic model (switch,
50 GiB/s, 500 ns) with every rank replayed (the ranks differ, so no symmetry shortcut and,
with several lanes, no merged compute runs). The machine is shared: the load average is printed.

    .venv/bin/python bench/trace_io.py [--nodes 100000] [--ranks 8] [--repeat 2] [--columns-only]
    .venv/bin/python bench/trace_io.py --nodes 1250000 --ranks 8 --memory   # 10 M nodes
    .venv/bin/python bench/trace_io.py --nodes 1250000 --ranks 8 --memory --columns

The timed loads also read the .et files into columns (``genie.workload.columnar.load_columns``:
decode and every check of ``load_workload``, no Python object per node), printing the columns'
bytes per node. ``--memory`` skips the timed loads: it writes the .et files (ranks 0 and 1
generated one at a time, the other ranks copies of the one of their parity, which
``pytorch_style`` makes alike) and loads, compiles and replays them in a fresh child process
(so the generator's memory does not count), printing that process's wall and CPU seconds and
its peak RSS after each stage, with bytes per node; with ``--columns`` the child loads into
columns without keeping the file bytes (``keep_bytes=False``) instead, compiles the columns
(``genie.sim.columns_compile``, stream rules from ``genie.workload.stream_columns``: no Node
object) and replays them (the engine's compact mode from 4 M nodes, ``COMPACT_NODES``).

Figures (issue 33; 2-core shared box, load average 2-3, CPU time): default run, 8 x 100,927
nodes: load .et into columns 271k nodes/s (122 B/node of columns), load .et 195k (before the
columnar reader: 51-79k), .et.gz 196k. ``--nodes 1250000 --ranks 8 --memory --columns``:
10,060,568 nodes loaded into columns in 44-53 s CPU (189-227k nodes/s), peak RSS 2,136 MB
(219 B/node over imports); the same trace as objects needs about 1.2 KB/node to load and
1.5-1.7 KB/node through compile and replay.

Issue 33, 10 M nodes end to end (columns, stream rules on columns, compact engine; same box,
load average 4-7, two runs): ``--nodes 1250000 --ranks 8 --memory --columns``: 10,060,568
nodes; load 34-43 s CPU, peak RSS 2,123-2,128 MiB; compile +18-25 s CPU, peak 3,280-3,305 MiB
(the run's peak: 338-341 B/node over imports); replay +16-20 s CPU, no higher; iteration
103,394.067 ms simulated. Before: compile made each rank as Node objects for its stream rules
(~1.9 GB a 1.25 M-node rank) and the replay's own state cost ~456 B/node (now 324 in list
mode, 174 in compact mode; at 1 M nodes this bench's replay peak went 609 -> 511 MiB).

Issue 33, second session of 2026-12-07 (quiet box, load average 1.0): default run: load .et
into columns 327k nodes/s, load .et 242k, .et.gz 242k; 10 M nodes ``--memory --columns``:
load 35.5 s CPU, peak 2,124 MiB; compile +23.5 s, peak 3,061 MiB (315 B/node over imports,
after compile_columns frees its workload-wide columns once used); replay +24.4 s, no higher.
(Peak RSS is printed in MiB: VmHWM / 1024.)

Issue 33, read memo session (runs of attr fields decoded once per workload, comprehension
slicing; same box, load average 3.3-4.6, this script with the commit before, then after, CPU):
load .et into columns 285k -> 290k nodes/s, load .et 186k -> 208k, .et.gz 193k -> 208k.

Issue 33, block buffer session (et_columns reads every block through one kept buffer instead
of a fresh block-sized copy, bool array and slice per block, whose page faults cost about a
quarter of the read on this VM; same box, load average 1.6-2.0; ``--columns-only``, the trees
at 0c88a02 and after in turn, 4 pairs, CPU): load .et into columns 230k-292k -> 369k-387k nodes/s
(pair by pair 1.26x-1.64x, median 1.54x). In a process that only reads the same files (2 reads,
7 pairs) user time fell 6 % and system time 72 %: the gain is the page faults. Default run,
one of each (load average ~2): load .et into columns 229k (0c88a02) -> 342k nodes/s CPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from google.protobuf import json_format
from workload_io import best  # bench/: best of n runs, (wall, CPU) seconds

from genie.sim.adapter import compile_workload
from genie.sim.engine import simulate
from genie.sim.network import AnalyticalBackend
from genie.sim.traffic import NetModel
from genie.workload import et_schema, load_workload, save_workload
from genie.workload.et_codec import gc_paused, split_frames, write_trace
from genie.workload.generators.pytorch_style import (
    process_groups,
    pytorch_style,
    pytorch_style_rank,
)

LAYERS = 96


def rate(n: int, t: tuple[float, float]) -> str:
    """Seconds and nodes/s, wall and CPU."""
    return f"{t[0]:6.2f} s  {n / t[0]:>10,.0f} nodes/s (CPU: {n / t[1]:>10,.0f} nodes/s)"


def nodes_per_rank(layers: int, steps: int) -> int:
    """Nodes of one rank of ``pytorch_style`` (bucket of 2 layers)."""
    host = layers // 2 + (layers % 2 > 0)
    per_step = 2 * layers + 2 * host + 3 + 2 * layers + host
    return 1 + steps * per_step


def jsonize(et: Path, out: Path) -> None:
    """Write what chakra_jsonizer writes for ``et`` (protobuf's JSON of every message)."""
    data = et.read_bytes()
    parts = []
    for k, (_, s, e) in enumerate(split_frames(data, str(et))):
        msg = et_schema.GlobalMetadata() if k == 0 else et_schema.Node()
        msg.ParseFromString(data[s:e])
        parts.append(json_format.MessageToJson(msg))
    out.write_text("".join(parts))


def _peak_mb() -> float:
    """This process's peak RSS in MiB (VmHWM: unlike ru_maxrss, not inherited over exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_by_parity(prefix: Path, ranks: int, steps: int) -> int:
    """Write ``pytorch_style``'s rank files one rank at a time (ranks 0 and 1 generated, the
    others copied from the one of their parity: the generator makes them alike); nodes."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    total = 0
    for r in range(min(2, ranks)):
        with gc_paused():
            rg = pytorch_style_rank(r, ranks, layers=LAYERS, steps=steps)
        write_trace(prefix.with_name(f"{prefix.name}.{r}.et"), rg.metadata, rg.nodes)
        total += len(rg.nodes) * len(range(r, ranks, 2))
        del rg
    for r in range(2, ranks):
        shutil.copy(
            prefix.with_name(f"{prefix.name}.{r % 2}.et"), prefix.with_name(f"{prefix.name}.{r}.et")
        )
    groups = {g["pg_name"]: g["ranks"] for g in process_groups(ranks)}
    prefix.with_name(prefix.name + ".comm_group.json").write_text(json.dumps(groups) + "\n")
    return total


def _stager(n_of: list[int]):
    """A function printing wall and CPU seconds since now and the peak RSS, per stage."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    base = _peak_mb()

    def stage(label: str, extra: str = "") -> None:
        mb = _peak_mb()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = max(n_of[0], 1)
        print(
            f"  {label:<9} wall {wall:7.1f} s  CPU {cpu:7.1f} s  peak RSS {mb:8,.0f} MiB "
            f"({(mb - base) * 2**20 / n:,.0f} B/node over imports){extra}",
            flush=True,
        )

    return stage


def measure_columns(prefix: str) -> None:
    """Load ``prefix`` into columns without the file bytes, compile the columns and replay;
    print time and peak RSS after each stage."""
    from genie.workload.columnar import load_columns

    n_of = [1]
    stage = _stager(n_of)
    c0 = time.process_time()
    cw = load_columns(prefix, keep_bytes=False)
    n = n_of[0] = cw.node_count()
    cpu = time.process_time() - c0
    stage("columns", f"; columns {cw.nbytes() / n:,.0f} B/node; {n / cpu:,.0f} nodes/s CPU")
    n_ranks = cw.n_ranks
    comp = compile_workload(cw)
    del cw
    stage("compile", f"; compiled {_compiled_bytes(comp) / n:,.0f} B/node")
    raw = simulate(comp, AnalyticalBackend(NetModel(n_ranks, 50 * 2**30, 500e-9)))
    stage("replay")
    print(f"  {n:,d} nodes, iteration {raw.makespan * 1e3:.3f} ms simulated")


def _compiled_bytes(comp: object) -> int:
    """Bytes of the numpy arrays a CompiledWorkload's ranks hold."""
    total = 0
    for cr in comp.ranks:  # type: ignore[attr-defined]
        for v in vars(cr).values():
            if isinstance(v, np.ndarray):
                total += v.nbytes
    return total


def measure(prefix: str) -> None:
    """Load, compile and replay ``prefix`` in this process; print time and peak RSS per stage."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    base = _peak_mb()

    def stage(label: str, n: int) -> None:
        mb = _peak_mb()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"  {label:<9} wall {wall:7.1f} s  CPU {cpu:7.1f} s  peak RSS {mb:8,.0f} MiB "
            f"({(mb - base) * 2**20 / n:,.0f} B/node over imports)",
            flush=True,
        )

    wl = load_workload(prefix)
    n = wl.node_count()
    stage("load", n)
    cw = compile_workload(wl)
    stage("compile", n)
    raw = simulate(cw, AnalyticalBackend(NetModel(wl.n_ranks, 50 * 2**30, 500e-9)))
    stage("replay", n)
    print(f"  {n:,d} nodes, iteration {raw.makespan * 1e3:.3f} ms simulated")


def _time_columns(et: Path, n: int, repeat: int) -> None:
    """Print the best of ``repeat`` reads of the rank files ``et`` into columns."""
    from genie.workload.columnar import load_columns

    kept = []

    def load_cols() -> None:
        kept[:] = [load_columns(et)]

    t = best(load_cols, repeat)
    cw = kept.pop()
    assert cw.node_count() == n
    print(
        f"  load .et into columns    {rate(n, t)}   [{cw.nbytes() / n:,.0f} B/node of "
        "columns, plus the file bytes]"
    )


def main() -> None:
    """Build, write and time; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000, help="nodes per rank (at least)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--memory", action="store_true", help="peak RSS of load + compile + replay")
    ap.add_argument("--columns", action="store_true", help="--memory: load into columns")
    ap.add_argument(
        "--columns-only",
        action="store_true",
        help="time the .et read into columns alone (no object loads, JSON, compile or replay)",
    )
    ap.add_argument("--measure", metavar="PREFIX", help=argparse.SUPPRESS)  # the child's part
    args = ap.parse_args()
    if args.measure:
        (measure_columns if args.columns else measure)(args.measure)
        return
    steps = max(1, math.ceil((args.nodes - 1) / (nodes_per_rank(LAYERS, 1) - 1)))
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (shared machine)")
    tmp = Path(tempfile.mkdtemp(prefix="genie-bench-"))
    try:
        if args.memory:
            et = tmp / "et" / "t"
            c0 = time.process_time()
            n = write_by_parity(et, args.ranks, steps)
            print(
                f"real-style trace: {args.ranks} ranks x {n // args.ranks:,d} nodes = {n:,d} "
                f"nodes, written in {time.process_time() - c0:.1f} s CPU; load "
                f"{'into columns' if args.columns else '+ compile + replay'} in a child "
                f"process ({et}.<rank>.et):",
                flush=True,
            )
            child = [sys.executable, __file__, "--measure", str(et)]
            subprocess.run(child + (["--columns"] if args.columns else []), check=True)
            return
        with gc_paused():
            wl = pytorch_style(args.ranks, layers=LAYERS, steps=steps)
        n = wl.node_count()
        print(
            f"real-style trace: {args.ranks} ranks x {n // args.ranks:,d} nodes = {n:,d} nodes "
            f"({LAYERS} layers x {steps} steps; genie.workload.generators.pytorch_style)"
        )
        t = best(lambda: save_workload(wl, tmp / "et" / "t"), 1)
        del wl
        print(f"  write .et                {rate(n, t)}")
        et = tmp / "et" / "t"
        if args.columns_only:
            _time_columns(et, n, args.repeat)
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            return
        (tmp / "gz").mkdir()
        (tmp / "js").mkdir()
        (tmp / "jsgz").mkdir()
        for r in range(args.ranks):
            raw = et.with_name(f"t.{r}.et").read_bytes()
            (tmp / "gz" / f"t.{r}.et.gz").write_bytes(gzip.compress(raw, 6))
        for f in ("t.comm_group.json",):
            for d in ("gz", "js", "jsgz"):
                shutil.copy(et.with_name(f), tmp / d / f)
        # ranks of one parity are identical: jsonize ranks 0 and 1, copy to the others
        for r in range(min(2, args.ranks)):
            jsonize(et.with_name(f"t.{r}.et"), tmp / "js" / f"t.{r}.json")
        for r in range(2, args.ranks):
            shutil.copy(tmp / "js" / f"t.{r % 2}.json", tmp / "js" / f"t.{r}.json")
        for r in range(args.ranks):
            raw = (tmp / "js" / f"t.{r}.json").read_bytes()
            (tmp / "jsgz" / f"t.{r}.json.gz").write_bytes(gzip.compress(raw, 6))

        def size(d: str) -> str:
            return f"{sum(f.stat().st_size for f in (tmp / d).iterdir()) / 1e6:,.0f} MB"

        _time_columns(et, n, args.repeat)
        wl = None
        for label, d in (
            (".et", "et"),
            (".et.gz", "gz"),
            ("Chakra JSON", "js"),
            ("Chakra JSON .gz", "jsgz"),
        ):
            holder = []

            def load(d=d, holder=holder):
                holder[:] = [load_workload(tmp / d / "t")]

            t = best(load, args.repeat)
            got = holder[0]
            assert got.node_count() == n, (label, got.node_count(), n)
            print(f"  load {label:<17}   {rate(n, t)}   [{size(d)}]")
            wl = got
        t0 = time.perf_counter()
        cw = compile_workload(wl)
        t_comp = time.perf_counter() - t0
        print(f"  compile for the engine   {t_comp:6.2f} s  {n / t_comp:>10,.0f} nodes/s")
        be = AnalyticalBackend(NetModel(args.ranks, 50 * 2**30, 500e-9))
        t0 = time.perf_counter()
        raw = simulate(cw, be)
        t_sim = time.perf_counter() - t0
        lanes = sorted({x for cr in cw.ranks for x in cr.lane_names})
        print(
            f"  replay, every rank       {t_sim:6.2f} s  {n / t_sim:>10,.0f} nodes/s "
            f"(iteration {raw.makespan * 1e3:.3f} ms simulated; lanes {', '.join(lanes)})"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
