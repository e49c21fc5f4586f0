"""Benchmark of genie.collectives: programs built/s, steps/s of the data and cost executors.

Run: ``.venv/bin/python bench/collectives.py`` (about a minute; ``--full`` adds the slow
1,024-rank ring through the data executor and the full event simulation).
Programs are ring and halving-doubling all-reduces; buffers are small for the data executor
(it holds one int64 per byte per rank), and 64 MiB for building and pricing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.collectives.data_exec import run_data
from genie.vocabulary import closed_form

RANKS = (8, 64, 512, 1024)
BW, LAT = 12.5e9, 1e-6  # 100 Gbit/s, 1 us per link


def _timed(fn, min_time: float = 0.2, max_reps: int = 1000) -> tuple[float, int]:
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_time or reps >= max_reps:
            return dt, reps


def bench_build() -> None:
    print("building (ring all-reduce, 64 MiB, 4 chunks)")
    print(f"  {'ranks':>6} {'programs/s':>12} {'rank step lists/s':>18} {'steps/s':>12}")
    for n in RANKS:
        dt, reps = _timed(lambda n=n: build_program("all_reduce", "ring", n, 64 << 20, chunks=4))
        specs = reps / dt
        ranks = [0, n // 3, n - 1]

        def build_steps(n=n, ranks=ranks):
            p = build_program("all_reduce", "ring", n, 64 << 20, chunks=4)
            return sum(len(p.steps(r)) for r in ranks)

        t0 = time.perf_counter()
        steps = build_steps()
        dt = time.perf_counter() - t0
        print(f"  {n:>6} {specs:>12,.0f} {len(ranks) / dt:>18,.1f} {steps / dt:>12,.0f}")


def bench_executors(full: bool) -> None:
    print(
        "executors: steps/s of the data executor and the full event simulation (every rank's "
        "steps); one-rank shortcut: time to build rank 0 and price"
    )
    print(
        f"  {'program':<27} {'ranks':>6} {'steps':>10} {'data':>10} {'event':>10} "
        f"{'one-rank shortcut':>18}"
    )
    for algo in ("ring", "halvingDoubling"):
        for n in RANKS:
            slow = algo == "ring" and n >= 1024 and not full
            p = build_program("all_reduce", algo, n, 16 * n)
            topo = T.switch(n, BW, LAT)
            row = [f"  {'all_reduce/' + algo:<27} {n:>6}"]
            total = None
            if slow:
                row.append(f"{'(--full)':>10} {'-':>10} {'-':>10}")
            else:
                t0 = time.perf_counter()
                res = run_data(p, max_steps=10_000_000)
                dt = time.perf_counter() - t0
                total = res.steps
                t0 = time.perf_counter()
                c = estimate(p, topo, symmetric=False)
                de = time.perf_counter() - t0
                row.append(f"{total:>10,} {total / dt:>10,.0f} {c.steps / de:>10,.0f}")
            fresh = build_program("all_reduce", algo, n, 16 * n)  # steps not cached yet
            t0 = time.perf_counter()
            c = estimate(fresh, topo)
            ds = time.perf_counter() - t0
            row.append(f"{ds * 1e3:>9.1f} ms ({c.method})")
            print(" ".join(row))
            sys.stdout.flush()


def bench_headline() -> None:
    n, size, chunks = 1024, 64 << 20, 4
    times, cost = [], None
    for _ in range(5):
        t0 = time.perf_counter()
        p = build_program("all_reduce", "ring", n, size, chunks=chunks)
        cost = estimate(p, T.switch(n, BW, LAT))
        times.append(time.perf_counter() - t0)
    cf = closed_form("all_reduce", "ring", n, size, BW, 2 * LAT)
    print(
        f"1,024-rank ring all-reduce, 64 MiB, 4 chunks, built + priced on a 100 Gbit/s switch: "
        f"median {statistics.median(times):.3f} s, best {min(times):.3f} s over 5 runs "
        f"({cost.method}, {cost.steps:,} steps of rank 0); modeled {cost.time_s * 1e3:.4f} ms "
        f"vs closed form {cf * 1e3:.4f} ms"
    )


def main() -> int:
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="also the 1,024-rank ring executors")
    args = ap.parse_args()
    bench_build()
    bench_executors(args.full)
    bench_headline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
