"""What one agent process sustains for eight ranks: byte rate per rank, message rate, CPU.

Two local agents with eight ranks each (a lab server's shape), loopback TCP between them and the
intra-host model between ranks of one agent. Per size, ``genie.bench`` of an all-to-all over the
16 ranks (direct: every rank sends to every other), and per agent process its CPU time (psutil:
the whole Python process, every rank thread and the control loop) over the sweep's wall time.
Printed per size: p50 iteration time, bytes each rank sent to the other agent per second
(GB = 10^9 B), TCP messages per second each agent sent, and the cores each agent used. When the
cores come near what the machine has, the agents, not the network, set the pace.

    .venv/bin/python bench/agent_rate.py
    .venv/bin/python bench/agent_rate.py --sizes 1KiB,4MiB --iters 20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import genie  # noqa: E402
from genie.controller.local import LocalCluster  # noqa: E402
from genie.units import format_bytes, parse_size_sweep  # noqa: E402

RANKS_PER_AGENT = 8
AGENTS = 2


def main(argv: list[str] | None = None) -> int:
    """Print one row per size."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16KiB,256KiB,4MiB,32MiB", help="all-to-all buffers")
    ap.add_argument("--iters", type=int, default=10, help="measured iterations per size")
    a = ap.parse_args(argv)
    n = AGENTS * RANKS_PER_AGENT
    remote = RANKS_PER_AGENT  # each rank's peers on the other agent
    print(
        f"{AGENTS} agents x {RANKS_PER_AGENT} ranks, all-to-all (direct) over {n} ranks; "
        f"{os.cpu_count()} cores on this machine"
    )
    print("size      p50 iter   per rank to the other agent   TCP msgs/s per agent   cores/agent")
    with (
        tempfile.TemporaryDirectory(prefix="genie-rate-") as d,
        LocalCluster.start(AGENTS, Path(d) / "c", ranks_per_host=RANKS_PER_AGENT) as cl,
    ):
        procs = [psutil.Process(p.pid) for p in cl.procs]
        for size in parse_size_sweep(a.sizes):
            spec = genie.BenchSpec(
                testbed=str(cl.testbed_path),
                collective="all_to_all",
                algorithm="direct",
                sizes=(size,),
                iters=a.iters,
                warmup=2,
                store=None,
                progress=False,
                calibration="none",
            )
            cpu0 = [sum(p.cpu_times()[:2]) for p in procs]
            t0 = time.monotonic()
            (row,) = genie.bench(spec).rows
            wall = time.monotonic() - t0
            cores = [sum(p.cpu_times()[:2]) - c for p, c in zip(procs, cpu0, strict=True)]
            t = row.stats.p50
            per_peer = size // n  # all-to-all: the buffer is cut into one block per rank
            rate = remote * per_peer / t
            msgs = RANKS_PER_AGENT * remote / t
            print(
                f"{format_bytes(size):>9} {t * 1e3:8.2f} ms   {rate / 1e9:10.3f} GB/s"
                f"{'':17}{msgs:10.0f}{'':13}" + " ".join(f"{c / wall:.2f}" for c in cores),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
