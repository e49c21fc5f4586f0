"""Benchmark: Chakra ET write and read speed for a 1,000,000-node workload (nodes/s).

Two workloads: ``generated`` (the llm generator scaled to >= 1M nodes over 8 ranks; attrs repeat
per layer, as in generated traces) and ``varied`` (one rank of 1M nodes whose num_ops and
tensor_size differ on every node, so no attr is decoded from the memo). Reported per workload:
write (encode + file write), read (decode of every rank file into Nodes) and load
(``load_workload``: read plus all validation and cross-rank checks). Best of ``--repeat`` runs.
The machine is shared (other jobs may hold the CPU); the load average is printed alongside.

    .venv/bin/python bench/workload_io.py [--nodes 1000000] [--repeat 2] [--protobuf]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

from genie.workload import load_workload, save_workload
from genie.workload.et_codec import decode_trace_protobuf, gc_paused, read_trace
from genie.workload.generators import llm
from genie.workload.generators.builder import RankBuilder, finish


def generated(n_nodes: int):
    """The llm generator (8 ranks, tp 2, pp 2) with enough micro-batches for n_nodes."""
    base = llm(8, tp=2, pp=2, layers=64, micro_batches=1).node_count()
    inc = llm(8, tp=2, pp=2, layers=64, micro_batches=2).node_count() - base
    mb = 1 + max(0, math.ceil((n_nodes - base) / inc))
    return llm(8, tp=2, pp=2, layers=64, micro_batches=mb)


def varied(n_nodes: int):
    """One rank: a compute chain with per-node num_ops/tensor_size and an all-reduce every 10."""
    b = RankBuilder(0)
    prev = None
    for i in range(n_nodes):
        if i % 10 == 9:
            prev = b.collective(f"ar{i}", 0, 1 << 20 | i, [prev])
        else:
            prev = b.compute(f"op{i}", 1e-5 + i * 1e-9, [prev], flops=1e6 + i, tensor_bytes=4 * i)
    return finish("varied", [b])


def best(fn, repeat: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of ``repeat`` calls of fn."""
    times = []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t, time.process_time() - c))
    return min(times)


def rate(n: int, t: tuple[float, float]) -> str:
    """nodes/s by wall clock and by this process's CPU time."""
    return f"{n / t[0]:>9,.0f} nodes/s (CPU time: {n / t[1]:>9,.0f})"


def run(name: str, wl, repeat: int, use_protobuf: bool, tmp: Path) -> None:
    """Measure write, read and load of one workload and print nodes/s."""
    n = wl.node_count()
    prefix = tmp / name / name
    t_write = best(lambda: save_workload(wl, prefix), repeat)
    files = sorted(prefix.parent.glob(f"{name}.*.et"))
    size = sum(f.stat().st_size for f in files)

    def read_all():
        total = 0
        for f in files:
            total += len(read_trace(f)[1])
        assert total == n

    t_read = best(read_all, repeat)
    t_load = best(lambda: load_workload(prefix), repeat)
    print(f"{name}: {n:,d} nodes in {len(files)} files ({size / 1e6:.1f} MB)")
    print(f"  write          {rate(n, t_write)}")
    print(f"  read           {rate(n, t_read)}")
    print(f"  load+validate  {rate(n, t_load)}")
    if use_protobuf:
        f = files[0]
        data = f.read_bytes()
        k = len(read_trace(f)[1])
        t_pb = best(lambda: decode_trace_protobuf(data), 1)
        print(f"  protobuf (upb) reference reader, {f.name}: {rate(k, t_pb)}")


def main() -> None:
    """Run the benchmark and print figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="runs per figure; the best is kept")
    ap.add_argument("--protobuf", action="store_true", help="also time protobuf's own parser")
    args = ap.parse_args()
    print(
        f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (shared machine), "
        f"goal: read >= 300,000 nodes/s"
    )
    tmp = Path(tempfile.mkdtemp(prefix="genie-bench-"))
    try:
        for name, make in (("generated", generated), ("varied", varied)):
            with gc_paused():  # building the test data is not what is measured
                wl = make(args.nodes)
            run(name, wl, args.repeat, args.protobuf, tmp)
            del wl
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
