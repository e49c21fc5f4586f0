"""Benchmark: Chakra ET write and read speed for a 1,000,000-node workload (nodes/s).

Two workloads: ``generated`` (the llm generator scaled to >= 1M nodes over 8 ranks; attrs repeat
per layer, as in generated traces) and ``varied`` (one rank of 1M nodes whose num_ops and
tensor_size differ on every node, so no attr is decoded from the memo). Reported per workload:
write (encode + file write), read (decode of every rank file into Nodes) and load
(``load_workload``: read plus all validation and cross-rank checks). Best of ``--repeat`` runs.
The machine is shared (other jobs may hold the CPU); the load average is printed alongside.

    .venv/bin/python bench/workload_io.py [--nodes 1000000] [--repeat 2] [--protobuf]
    .venv/bin/python bench/workload_io.py --generate 1024,2048,4096

``--generate N,...`` times ``genie workload generate llm --ranks N`` instead (a child process:
wall and CPU seconds, peak RSS, bytes written). On this 2-core machine (issue 33), before each
rank's file held only its own process groups (every file carried the ~N-group table):
1024 ranks 7.96 s, 376 MB RSS, 42.9 MB written; 2048 ranks 25.7 s, 1.14 GB, 145 MB (4096:
157 s, 3.9 GB, 513 MB, from the issue). After (own groups only, each group's member list
encoded once): 1024 ranks 3.07 s, 173 MB, 14.6 MB; 4096 ranks 11.9 s, 612 MB, 64.8 MB; 8192
ranks 26.0 s, 1.20 GB, 147 MB; 16384 ranks 53.0 s, 2.31 GB, 361 MB (about half of it the DP
groups' member lists, which grow with the ranks: dp = ranks / (tp pp) members per rank).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
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


def generate_once(ranks: int, tmp: Path) -> str:
    """One ``genie workload generate llm --ranks N`` in a child: its figures as a line."""
    out = tmp / f"llm{ranks}"
    cmd = [sys.executable, "-m", "genie", "workload", "generate", "llm", "--ranks", str(ranks)]
    t = time.perf_counter()
    child = subprocess.Popen(
        [*cmd, "--out", str(out / "llm")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _pid, status, use = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t
    if status:
        raise SystemExit(f"{' '.join(cmd)} failed (wait status {status})")
    size = sum(f.stat().st_size for f in out.iterdir())
    rss_mb = use.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 1e6
    shutil.rmtree(out, ignore_errors=True)
    return (
        f"generate llm --ranks {ranks:>6}: {wall:6.2f} s wall, "
        f"{use.ru_utime + use.ru_stime:6.2f} s CPU, peak RSS {rss_mb:7.1f} MB, "
        f"wrote {size / 1e6:7.1f} MB"
    )


def main() -> None:
    """Run the benchmark and print figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="runs per figure; the best is kept")
    ap.add_argument("--protobuf", action="store_true", help="also time protobuf's own parser")
    ap.add_argument(
        "--generate", metavar="N,...", help="time `genie workload generate llm --ranks N` instead"
    )
    args = ap.parse_args()
    if args.generate:
        print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (shared machine)")
        tmp = Path(tempfile.mkdtemp(prefix="genie-bench-"))
        try:
            for n in (int(x) for x in args.generate.split(",")):
                print(generate_once(n, tmp), flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
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
